// infokv eval: what each compression policy costs at each budget, against the full cache (DESIGN.md §4).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <unistd.h>

#include "cli/args.hpp"
#include "cli/eval_metrics.hpp"
#include "cli/json.hpp"
#include "util/error.hpp"

namespace infokv {
namespace cli {

double kl_divergence(const float *p, const float *q, int32_t n) {
  double mp = p[0], mq = q[0];
  for (int32_t i = 1; i < n; ++i) {
    mp = std::max(mp, static_cast<double>(p[i]));
    mq = std::max(mq, static_cast<double>(q[i]));
  }
  double zp = 0, zq = 0;
  for (int32_t i = 0; i < n; ++i) {
    zp += std::exp(p[i] - mp);
    zq += std::exp(q[i] - mq);
  }
  const double lzp = std::log(zp) + mp, lzq = std::log(zq) + mq;
  double kl = 0;
  for (int32_t i = 0; i < n; ++i) {
    const double lp = p[i] - lzp, lq = q[i] - lzq;
    kl += std::exp(lp) * (lp - lq);
  }
  return std::max(0.0, kl);
}

int32_t argmax(const float *v, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

namespace {

struct Row {
  std::string policy;
  double budget = 1.0;
  double max_loss = 0;  // > 0: auto under this quality target (no budget; the bytes it reached are the result)
  std::vector<double> kl, top1, nll;  // per window
  std::vector<int64_t> kv_bytes, kv_bytes_full;
};

double mean(const std::vector<double> &v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void write_svg(const std::string &path, const std::vector<Row> &rows) {
  std::vector<std::string> policies;
  std::vector<double> budgets;
  for (const Row &r : rows) {
    if (std::find(policies.begin(), policies.end(), r.policy) == policies.end()) policies.push_back(r.policy);
    if (r.max_loss > 0) continue;  // quality-target rows have no budget to plot against
    if (r.policy != "none") budgets.push_back(r.budget);
  }
  double kl_max = 1e-6, ppl_min = 1e300, ppl_max = 0;
  for (const Row &r : rows) {
    kl_max = std::max(kl_max, mean(r.kl));
    const double p = std::exp(mean(r.nll));
    ppl_min = std::min(ppl_min, p);
    ppl_max = std::max(ppl_max, p);
  }
  if (ppl_max <= ppl_min) ppl_max = ppl_min + 1;
  const double bmin = budgets.empty() ? 0 : *std::min_element(budgets.begin(), budgets.end());
  const double bmax = 1.0;
  const char *colors[] = {"#444444", "#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2"};
  std::ofstream f(path);
  if (!f) fail(Status::io, "cannot write '" + path + "'");
  const int W = 900, H = 380, pw = 360, ph = 260, top = 50;
  f << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  f << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  auto panel = [&](int x0, const std::string &title, bool is_kl) {
    f << "<text x=\"" << x0 + pw / 2 << "\" y=\"30\" text-anchor=\"middle\" font-size=\"14\">" << title << "</text>\n";
    f << "<rect x=\"" << x0 << "\" y=\"" << top << "\" width=\"" << pw << "\" height=\"" << ph << "\" fill=\"none\" stroke=\"#999\"/>\n";
    const double lo = is_kl ? 0 : ppl_min, hi = is_kl ? kl_max : ppl_max;
    auto X = [&](double b) { return x0 + (bmax > bmin ? (b - bmin) / (bmax - bmin) : 0.5) * pw; };
    auto Y = [&](double v) { return top + ph - (v - lo) / (hi - lo) * ph; };
    for (int k = 0; k <= 4; ++k) {
      const double v = lo + (hi - lo) * k / 4;
      char b[32];
      std::snprintf(b, sizeof b, is_kl ? "%.3g" : "%.4g", v);
      f << "<text x=\"" << x0 - 6 << "\" y=\"" << Y(v) + 4 << "\" text-anchor=\"end\">" << b << "</text>\n";
    }
    std::vector<double> bs = budgets;
    bs.push_back(1.0);
    std::sort(bs.begin(), bs.end());
    bs.erase(std::unique(bs.begin(), bs.end()), bs.end());
    for (double b : bs)
      f << "<text x=\"" << X(b) << "\" y=\"" << top + ph + 16 << "\" text-anchor=\"middle\">" << b * 100 << "%</text>\n";
    f << "<text x=\"" << x0 + pw / 2 << "\" y=\"" << top + ph + 34 << "\" text-anchor=\"middle\">KV budget (fraction of the prefix)</text>\n";
    for (size_t pi = 0; pi < policies.size(); ++pi) {
      std::vector<std::pair<double, double>> pts;
      for (const Row &r : rows)
        if (r.max_loss <= 0 && (r.policy == policies[pi] || r.policy == "none"))
          pts.emplace_back(r.budget, is_kl ? mean(r.kl) : std::exp(mean(r.nll)));
      if (policies[pi] == "none") continue;
      std::sort(pts.begin(), pts.end());
      f << "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"" << colors[pi % 8] << "\" points=\"";
      for (auto &p : pts) f << X(p.first) << "," << Y(p.second) << " ";
      f << "\"/>\n";
    }
  };
  panel(70, "mean KL(full || compressed), nats", true);
  panel(70 + pw + 90, "perplexity of the continuation", false);
  for (size_t pi = 0, k = 0; pi < policies.size(); ++pi) {
    if (policies[pi] == "none") continue;
    f << "<text x=\"" << W - 70 << "\" y=\"" << top + 16 * k + 10 << "\" fill=\"" << colors[pi % 8] << "\">" << policies[pi] << "</text>\n";
    ++k;
  }
  f << "</svg>\n";
}

}  // namespace

int cmd_eval(int argc, char **argv) {
  std::set<std::string> valued = {"model",   "file",   "prefix", "continuation", "policies",
                                  "budgets", "plot",   "windows", "offset",      "max-losses"};
  for (const auto &n : session_option_names()) valued.insert(n);
  Args a(argc, argv, 2, valued, {"json", "chunked-prefill"});
  // --chunked-prefill: each policy and budget prefills the prefix as a long prompt is prefilled in generate
  // (Session::prefill: chunks of --ubatch with compression between them, then the final compression to the budget),
  // instead of compressing a full-cache prefix once; measures what never holding the full cache costs.
  const bool chunked = a.flag("chunked-prefill");
  const std::string path = model_path_from(a);
  const std::string text = read_file(a.required("file"));
  const int64_t N = a.integer("prefix", 0, 1, 1 << 24);
  const int64_t M = a.integer("continuation", 0, 1, 1 << 24);
  if (!a.has("prefix") || !a.has("continuation")) fail(Status::invalid_argument, "--prefix and --continuation are required");
  const int64_t windows = a.integer("windows", 1, 1, 10000);
  const int64_t offset = a.integer("offset", 0, 0, INT64_MAX);
  std::vector<std::string> policies = split_list(a.str("policies", "infokv,snapkv,h2o,streaming,tova,pyramidkv"));
  for (const auto &p : policies) parse_policy(p);
  policies.erase(std::remove(policies.begin(), policies.end(), std::string("none")), policies.end());
  std::vector<double> budgets;
  for (const auto &b : split_list(a.str("budgets", "0.5,0.25,0.125"))) {
    double fr;
    int32_t tk;
    parse_budget(b, &fr, &tk);
    if (tk > 0) fail(Status::invalid_argument, "eval budgets are fractions of the prefix (e.g. 0.25 or 25%)");
    budgets.push_back(fr);
  }
  // --max-losses E1,E2: auto under each quality target (no budget), reporting the bytes it reached.
  if (a.has("max-loss"))
    fail(Status::invalid_argument, "eval takes --max-losses E1,E2 (a row of auto per quality target), not --max-loss");
  std::vector<double> max_losses;
  for (const auto &e : split_list(a.str("max-losses", ""))) {
    char *end = nullptr;
    const double v = std::strtod(e.c_str(), &end);
    if (end == e.c_str() || *end != '\0' || !(v > 0 && std::isfinite(v)))
      fail(Status::invalid_argument, "--max-losses takes positive numbers (the proxy loss auto may reach), got '" + e + "'");
    max_losses.push_back(v);
  }
  if (!max_losses.empty() && chunked) fail(Status::invalid_argument, "--max-losses is measured on a full-cache prefix, not with --chunked-prefill");
  if (!max_losses.empty() && std::find(policies.begin(), policies.end(), "auto") == policies.end()) policies.push_back("auto");
  SessionOptions base = session_options_from(a);
  // --profile P: every compressed run starts from the tuning profile (each window from the profile as loaded).
  // Fair play: a profile is not evaluated on the tokens it was tuned on.
  const std::optional<TuningProfile> profile = profile_from_args(a);
  if (profile && profile->tuned_text_xxh3 != 0 && profile->tuned_text_xxh3 == profile_text_hash(text)) {
    const int64_t begin = offset, end = offset + windows * (N + M);
    if (begin < profile->tuned_end && profile->tuned_begin < end)
      fail(Status::invalid_argument, "--profile " + a.str("profile") + " was tuned on this text's tokens [" +
                                         std::to_string(profile->tuned_begin) + ", " + std::to_string(profile->tuned_end) +
                                         "); eval's windows [" + std::to_string(begin) + ", " + std::to_string(end) +
                                         ") overlap them: choose an --offset at or after " + std::to_string(profile->tuned_end) +
                                         " (or windows ending by " + std::to_string(profile->tuned_begin) + ")");
  }
  auto model = Model::load(path);
  const Tokenizer &tok = model->tokenizer();
  const int32_t V = model->hparams().n_vocab;
  std::vector<int32_t> all = tok.encode(text, false);
  const int64_t need = offset + windows * (N + M) + (tok.bos() >= 0 ? 0 : 1);
  if (static_cast<int64_t>(all.size()) < need)
    fail(Status::invalid_argument, "the text has " + std::to_string(all.size()) + " tokens; " + std::to_string(windows) +
                                       " window(s) of prefix " + std::to_string(N) + " + continuation " + std::to_string(M) +
                                       " from offset " + std::to_string(offset) + " need " + std::to_string(need));
  if (base.kv_pool_blocks == 0 && base.kv_pool_bytes == 0) {
    const int64_t per_seq = (N + M + 1 + base.block_size - 1) / base.block_size + 1;
    base.kv_pool_blocks = per_seq * model->hparams().n_layer * static_cast<int64_t>(2 + budgets.size());
  }
  const bool progress = isatty(2) != 0;
  std::vector<Row> rows;
  rows.push_back(Row{"none", 1.0, 0.0, {}, {}, {}, {}, {}});
  for (const auto &p : policies) {
    for (double b : budgets) rows.push_back(Row{p, b, 0.0, {}, {}, {}, {}, {}});
    if (p == "auto")
      for (double e : max_losses) rows.push_back(Row{p, 0.0, e, {}, {}, {}, {}, {}});
  }
  size_t done = 0;
  const size_t total = static_cast<size_t>(windows) * (1 + policies.size());
  for (int64_t w = 0; w < windows; ++w) {
    // seq = [BOS] + tokens[:N+M]; prefix seq[0:N]; continuation seq[N:N+M] predicts seq[N+1..N+M].
    std::vector<int32_t> seq;
    if (tok.bos() >= 0) seq.push_back(tok.bos());
    const auto from = all.begin() + offset + w * (N + M);
    seq.insert(seq.end(), from, from + (N + M + (tok.bos() >= 0 ? 0 : 1)));
    // The full-cache reference.
    std::vector<float> full;
    int64_t full_bytes = 0;
    {
      SessionOptions so = base;
      so.compression = CompressionConfig{};
      Session s(model, so);
      const int32_t id = s.add_sequence();
      std::vector<BatchToken> pre, cont;
      for (int64_t i = 0; i < N; ++i) pre.push_back({id, seq[static_cast<size_t>(i)], false});
      s.decode(pre);
      full_bytes = s.info(id).bytes;
      for (int64_t i = N; i < N + M; ++i) cont.push_back({id, seq[static_cast<size_t>(i)], true});
      s.decode(cont);
      full = s.batch_logits();
    }
    auto score = [&](Row &r, const std::vector<float> &lg, int64_t bytes) {
      double kl = 0, top1 = 0, nll = 0;
      for (int64_t t = 0; t < M; ++t) {
        const float *f = full.data() + t * V, *c = lg.data() + t * V;
        kl += kl_divergence(f, c, V);
        top1 += argmax(f, V) == argmax(c, V) ? 1.0 : 0.0;
        nll -= log_prob(c, V, seq[static_cast<size_t>(N + t + 1)]);
      }
      r.kl.push_back(kl / M);
      r.top1.push_back(top1 / M);
      r.nll.push_back(nll / M);
      r.kv_bytes.push_back(bytes);
      r.kv_bytes_full.push_back(full_bytes);
    };
    score(rows[0], full, full_bytes);
    if (progress) std::fprintf(stderr, "\reval: window %lld/%lld, %zu/%zu runs", static_cast<long long>(w + 1), static_cast<long long>(windows), ++done, total);
    size_t ri = 1;
    for (const auto &pname : policies) {
      if (chunked) {
        for (double b : budgets) {
          SessionOptions so = base;
          so.compression.policy = parse_policy(pname);
          so.compression.budget_fraction = b;
          so.compression.budget_tokens = 0;
          so.compression.interval = INT32_MAX;  // no compression inside the teacher-forced continuation
          Session s(model, so);
          apply_profile(profile, s);
          const int32_t id = s.add_sequence();
          s.prefill(id, std::vector<int32_t>(seq.begin(), seq.begin() + N));
          const int64_t bytes = s.info(id).bytes;
          std::vector<BatchToken> cont;
          for (int64_t i = N; i < N + M; ++i) cont.push_back({id, seq[static_cast<size_t>(i)], true});
          s.decode(cont);
          score(rows[ri++], s.batch_logits(), bytes);
        }
        if (progress) std::fprintf(stderr, "\reval: window %lld/%lld, %zu/%zu runs", static_cast<long long>(w + 1), static_cast<long long>(windows), ++done, total);
        continue;
      }
      SessionOptions so = base;
      so.compression.policy = parse_policy(pname);
      so.compression.budget_fraction = 1.0;
      so.compression.budget_tokens = 0;
      so.compression.compress_after_prefill = false;
      Session s(model, so);
      apply_profile(profile, s);
      const int32_t id = s.add_sequence();
      std::vector<BatchToken> pre;
      for (int64_t i = 0; i < N; ++i) pre.push_back({id, seq[static_cast<size_t>(i)], false});
      s.decode(pre);
      // One prefill per policy; each budget compresses a fork of it (forks share the prefix blocks).
      for (double b : budgets) {
        const int32_t f = s.fork_sequence(id);
        const auto budget_tokens = static_cast<int32_t>(std::max<int64_t>(1, std::llround(b * static_cast<double>(N))));
        apply_profile(profile, s);  // as loaded: the forks before did not refine it
        s.compress(f, budget_tokens);
        const int64_t bytes = s.info(f).bytes;
        std::vector<BatchToken> cont;
        for (int64_t i = N; i < N + M; ++i) cont.push_back({f, seq[static_cast<size_t>(i)], true});
        s.decode(cont);
        score(rows[ri++], s.batch_logits(), bytes);
        s.remove_sequence(f);
      }
      if (pname == "auto") {
        for (double e : max_losses) {
          const int32_t f = s.fork_sequence(id);
          s.compression().max_loss = e;
          s.compress(f, 0);
          s.compression().max_loss = 0;
          const int64_t bytes = s.info(f).bytes;
          std::vector<BatchToken> cont;
          for (int64_t i = N; i < N + M; ++i) cont.push_back({f, seq[static_cast<size_t>(i)], true});
          s.decode(cont);
          score(rows[ri++], s.batch_logits(), bytes);
          s.remove_sequence(f);
        }
      }
      if (progress) std::fprintf(stderr, "\reval: window %lld/%lld, %zu/%zu runs", static_cast<long long>(w + 1), static_cast<long long>(windows), ++done, total);
    }
  }
  if (progress) std::fprintf(stderr, "\n");
  if (a.has("plot")) write_svg(a.str("plot"), rows);
  if (a.flag("json")) {
    std::string arr = "[";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row &r = rows[i];
      JsonObject o;
      std::vector<double> ppl;
      for (double x : r.nll) ppl.push_back(std::exp(x));
      double bytes = 0, full_b = 0;
      for (size_t k = 0; k < r.kv_bytes.size(); ++k) {
        bytes += static_cast<double>(r.kv_bytes[k]);
        full_b += static_cast<double>(r.kv_bytes_full[k]);
      }
      o.str("policy", r.policy).num("budget", r.budget).num("max_loss", r.max_loss).num("ppl", std::exp(mean(r.nll))).num("kl", mean(r.kl))
          .num("top1", mean(r.top1)).integer("kv_bytes", static_cast<int64_t>(std::llround(bytes / r.kv_bytes.size())))
          .integer("kv_bytes_full", static_cast<int64_t>(std::llround(full_b / r.kv_bytes.size())))
          .num("kl_median", median(r.kl)).num("top1_median", median(r.top1)).num("ppl_median", median(ppl))
          .integer("windows", static_cast<int64_t>(r.kl.size()))
          .str("prefill", chunked && r.policy != "none" ? "chunked" : "full");
      std::string klw = "[", t1w = "[";
      for (size_t k = 0; k < r.kl.size(); ++k) {
        klw += (k ? "," : "") + json_num(r.kl[k]);
        t1w += (k ? "," : "") + json_num(r.top1[k]);
      }
      o.raw("kl_per_window", klw + "]").raw("top1_per_window", t1w + "]");
      arr += (i ? ",\n" : "") + o.dump();
    }
    std::printf("%s]\n", arr.c_str());
  } else {
    std::printf("prefix %lld tokens, continuation %lld, %lld window(s), KV %s%s\n", static_cast<long long>(N),
                static_cast<long long>(M), static_cast<long long>(windows), kv_dtype_name(base.kv_dtype),
                chunked ? ", prefix prefilled in chunks with compression between them" : "");
    std::printf("%-10s %7s %10s %10s %10s %7s %12s %8s\n", "policy", "budget", "ppl", "KL mean", "KL median", "top-1",
                "KV bytes", "of full");
    for (const Row &r : rows) {
      double bytes = 0, full_b = 0;
      for (size_t k = 0; k < r.kv_bytes.size(); ++k) {
        bytes += static_cast<double>(r.kv_bytes[k]);
        full_b += static_cast<double>(r.kv_bytes_full[k]);
      }
      char budget[32];
      if (r.max_loss > 0) std::snprintf(budget, sizeof budget, "<=%g", r.max_loss);
      else std::snprintf(budget, sizeof budget, "%.1f%%", r.budget * 100);
      std::printf("%-10s %7s %10.4f %10.5f %10.5f %7.3f %12.0f %7.1f%%\n", r.policy.c_str(), budget, std::exp(mean(r.nll)), mean(r.kl), median(r.kl), mean(r.top1), bytes / r.kv_bytes.size(),
                  100.0 * bytes / full_b);
    }
  }
  return 0;
}

}  // namespace cli
}  // namespace infokv
