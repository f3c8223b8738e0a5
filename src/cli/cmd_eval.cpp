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

// Everything eval measures, from its options (checked before the model loads).
struct EvalSetup {
  bool chunked = false;
  std::string path, text;
  int64_t N = 0, M = 0, windows = 1, offset = 0;
  std::vector<std::string> policies;
  std::vector<double> budgets, max_losses;
  SessionOptions base;
  std::optional<TuningProfile> profile;
};

// Fair play: a profile is not evaluated on the tokens it was tuned on.
void check_profile_not_tuned_here(const EvalSetup &e, const std::string &profile_path) {
  const std::optional<TuningProfile> &profile = e.profile;
  if (!profile || profile->tuned_text_xxh3 == 0 || profile->tuned_text_xxh3 != profile_text_hash(e.text)) return;
  const int64_t begin = e.offset, end = e.offset + e.windows * (e.N + e.M);
  if (begin < profile->tuned_end && profile->tuned_begin < end)
    fail(Status::invalid_argument, "--profile " + profile_path + " was tuned on this text's tokens [" +
                                       std::to_string(profile->tuned_begin) + ", " + std::to_string(profile->tuned_end) +
                                       "); eval's windows [" + std::to_string(begin) + ", " + std::to_string(end) +
                                       ") overlap them: choose an --offset at or after " + std::to_string(profile->tuned_end) +
                                       " (or windows ending by " + std::to_string(profile->tuned_begin) + ")");
}

EvalSetup parse_eval(const Args &a) {
  EvalSetup e;
  // --chunked-prefill: each policy and budget prefills the prefix as a long prompt is prefilled in generate
  // (Session::prefill: chunks of --ubatch with compression between them, then the final compression to the budget),
  // instead of compressing a full-cache prefix once; measures what never holding the full cache costs.
  e.chunked = a.flag("chunked-prefill");
  e.path = model_path_from(a);
  e.text = read_file(a.required("file"));
  e.N = a.integer("prefix", 0, 1, 1 << 24);
  e.M = a.integer("continuation", 0, 1, 1 << 24);
  if (!a.has("prefix") || !a.has("continuation")) fail(Status::invalid_argument, "--prefix and --continuation are required");
  e.windows = a.integer("windows", 1, 1, 10000);
  e.offset = a.integer("offset", 0, 0, INT64_MAX);
  e.policies = split_list(a.str("policies", "infokv,snapkv,h2o,streaming,tova,pyramidkv"));
  for (const auto &p : e.policies) parse_policy(p);
  e.policies.erase(std::remove(e.policies.begin(), e.policies.end(), std::string("none")), e.policies.end());
  e.budgets = fraction_list(a.str("budgets", "0.5,0.25,0.125"), "eval");
  // --max-losses E1,E2: auto under each quality target (no budget), reporting the bytes it reached.
  if (a.has("max-loss"))
    fail(Status::invalid_argument, "eval takes --max-losses E1,E2 (a row of auto per quality target), not --max-loss");
  e.max_losses = positive_list(a.str("max-losses", ""), "--max-losses", "the proxy loss auto may reach");
  if (!e.max_losses.empty() && e.chunked) fail(Status::invalid_argument, "--max-losses is measured on a full-cache prefix, not with --chunked-prefill");
  if (!e.max_losses.empty() && std::find(e.policies.begin(), e.policies.end(), "auto") == e.policies.end()) e.policies.push_back("auto");
  e.base = session_options_from(a);
  // The protocol asks about the tokens that follow the prefix at once: its compressions serve that question unless
  // --question says otherwise (packaging/docs/quality.md, "Which question", measures the others).
  if (!a.has("question")) e.base.compression.question = Question::next;
  // --profile P: every compressed run starts from the tuning profile (each window from the profile as loaded).
  e.profile = profile_from_args(a);
  check_profile_not_tuned_here(e, a.str("profile"));
  return e;
}

// Row 0 is the full cache; then, per policy, one row per budget and (auto) one per quality target.
std::vector<Row> make_rows(const EvalSetup &e) {
  std::vector<Row> rows;
  rows.push_back(Row{"none", 1.0, 0.0, {}, {}, {}, {}, {}});
  for (const auto &p : e.policies) {
    for (double b : e.budgets) rows.push_back(Row{p, b, 0.0, {}, {}, {}, {}, {}});
    if (p == "auto")
      for (double x : e.max_losses) rows.push_back(Row{p, 0.0, x, {}, {}, {}, {}, {}});
  }
  return rows;
}

// One window's measurements, appended to the rows.
class WindowEval {
 public:
  WindowEval(const EvalSetup &e, const std::shared_ptr<const Model> &model, const std::vector<int32_t> &seq)
      : e_(e), model_(model), seq_(seq), V_(model->hparams().n_vocab), full_(run_full_cache(model, e.base, seq, e.N, e.M)) {}

  void reference(Row &r) { score(r, full_); }

  // Each budget prefilled as generate prefills a prompt (Session::prefill: chunks, compressed at the end and
  // part-way only when memory requires it).
  void chunked(const std::string &pname, std::vector<Row> &rows, size_t &ri) {
    for (double b : e_.budgets) {
      SessionOptions so = e_.base;
      so.compression.policy = parse_policy(pname);
      so.compression.budget_fraction = b;
      so.compression.budget_tokens = 0;
      so.compression.interval = INT32_MAX;  // no compression inside the teacher-forced continuation
      Session s(model_, so);
      apply_profile(e_.profile, s);
      const int32_t id = s.add_sequence();
      s.prefill(id, std::vector<int32_t>(seq_.begin(), seq_.begin() + e_.N));
      ContinuationRun run;
      run.kv_bytes = s.info(id).bytes;
      run.logits = teacher_force(s, id, seq_, e_.N, e_.M);
      score(rows[ri++], run);
    }
  }

  // One prefill per policy; each budget (and, for auto, each quality target) compresses a fork of it (forks share
  // the prefix blocks).
  void forks(const std::string &pname, std::vector<Row> &rows, size_t &ri) {
    Session s(model_, compress_on_demand(e_.base, parse_policy(pname)));
    apply_profile(e_.profile, s);
    const int32_t id = decode_prefix(s, seq_, e_.N);
    // Each budget's fork starts from the profile as loaded: the forks before did not refine it.
    auto reload_profile = [&](int32_t) { apply_profile(e_.profile, s); };
    for (double b : e_.budgets)
      score(rows[ri++], run_compressed_fork(s, id, seq_, e_.N, e_.M, budget_tokens(b, e_.N), 0.0, reload_profile));
    if (pname == "auto")
      for (double x : e_.max_losses) score(rows[ri++], run_compressed_fork(s, id, seq_, e_.N, e_.M, 0, x));
  }

 private:
  void score(Row &r, const ContinuationRun &run) {
    const int64_t M = e_.M, N = e_.N;
    double kl = 0, top1 = 0, nll = 0;
    for (int64_t t = 0; t < M; ++t) {
      const float *f = full_.logits.data() + t * V_, *c = run.logits.data() + t * V_;
      kl += kl_divergence(f, c, V_);
      top1 += argmax(f, V_) == argmax(c, V_) ? 1.0 : 0.0;
      nll -= log_prob(c, V_, seq_[static_cast<size_t>(N + t + 1)]);
    }
    r.kl.push_back(kl / M);
    r.top1.push_back(top1 / M);
    r.nll.push_back(nll / M);
    r.kv_bytes.push_back(run.kv_bytes);
    r.kv_bytes_full.push_back(full_.kv_bytes);
  }

  const EvalSetup &e_;
  std::shared_ptr<const Model> model_;
  const std::vector<int32_t> &seq_;
  int32_t V_;
  ContinuationRun full_;
};

void mean_bytes(const Row &r, double *bytes, double *full_b) {
  *bytes = 0;
  *full_b = 0;
  for (size_t k = 0; k < r.kv_bytes.size(); ++k) {
    *bytes += static_cast<double>(r.kv_bytes[k]);
    *full_b += static_cast<double>(r.kv_bytes_full[k]);
  }
}

void print_json(const std::vector<Row> &rows, bool chunked) {
  std::string arr = "[";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row &r = rows[i];
    JsonObject o;
    std::vector<double> ppl;
    for (double x : r.nll) ppl.push_back(std::exp(x));
    double bytes, full_b;
    mean_bytes(r, &bytes, &full_b);
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
}

void print_table(const std::vector<Row> &rows, const EvalSetup &e) {
  std::printf("prefix %lld tokens, continuation %lld, %lld window(s), KV %s%s\n", static_cast<long long>(e.N),
              static_cast<long long>(e.M), static_cast<long long>(e.windows), kv_dtype_name(e.base.kv_dtype),
              e.chunked ? ", prefix prefilled in chunks as generate does" : "");
  std::printf("%-10s %7s %10s %10s %10s %7s %12s %8s\n", "policy", "budget", "ppl", "KL mean", "KL median", "top-1",
              "KV bytes", "of full");
  for (const Row &r : rows) {
    double bytes, full_b;
    mean_bytes(r, &bytes, &full_b);
    char budget[32];
    if (r.max_loss > 0) std::snprintf(budget, sizeof budget, "<=%g", r.max_loss);
    else std::snprintf(budget, sizeof budget, "%.1f%%", r.budget * 100);
    std::printf("%-10s %7s %10.4f %10.5f %10.5f %7.3f %12.0f %7.1f%%\n", r.policy.c_str(), budget, std::exp(mean(r.nll)), mean(r.kl), median(r.kl), mean(r.top1), bytes / r.kv_bytes.size(),
                100.0 * bytes / full_b);
  }
}

}  // namespace

int cmd_eval(int argc, char **argv) {
  std::set<std::string> valued = {"model",   "file",   "prefix", "continuation", "policies",
                                  "budgets", "plot",   "windows", "offset",      "max-losses"};
  for (const auto &n : session_option_names()) valued.insert(n);
  Args a(argc, argv, 2, valued, {"json", "chunked-prefill"});
  EvalSetup e = parse_eval(a);
  auto model = Model::load(e.path);
  const EvalWindows win = eval_windows(model->tokenizer(), e.text, e.N, e.M, e.windows, e.offset);
  size_eval_pool(e.base, *model, e.N, e.M, static_cast<int64_t>(2 + e.budgets.size()));
  const bool progress = isatty(2) != 0;
  std::vector<Row> rows = make_rows(e);
  size_t done = 0;
  const size_t total = static_cast<size_t>(e.windows) * (1 + e.policies.size());
  auto report = [&](int64_t w) {
    if (progress) std::fprintf(stderr, "\reval: window %lld/%lld, %zu/%zu runs", static_cast<long long>(w + 1), static_cast<long long>(e.windows), ++done, total);
  };
  for (int64_t w = 0; w < e.windows; ++w) {
    // seq = [BOS] + tokens[:N+M]; prefix seq[0:N]; continuation seq[N:N+M] predicts seq[N+1..N+M].
    const std::vector<int32_t> seq = win.window(w);
    WindowEval we(e, model, seq);
    we.reference(rows[0]);
    report(w);
    size_t ri = 1;
    for (const auto &pname : e.policies) {
      if (e.chunked) we.chunked(pname, rows, ri);
      else we.forks(pname, rows, ri);
      report(w);
    }
  }
  if (progress) std::fprintf(stderr, "\n");
  if (a.has("plot")) write_svg(a.str("plot"), rows);
  if (a.flag("json")) print_json(rows, e.chunked);
  else print_table(rows, e);
  return 0;
}

}  // namespace cli
}  // namespace infokv
