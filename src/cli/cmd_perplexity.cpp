#include <cmath>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>

#include "cli/args.hpp"
#include "cli/json.hpp"
#include "cli/eval_metrics.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "util/error.hpp"

namespace infokv {
namespace cli {

// log p(target) under softmax(logits), in double.
double log_prob(const float *logits, int32_t n, int32_t target) {
  double mx = logits[0];
  for (int32_t i = 1; i < n; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
  double z = 0;
  for (int32_t i = 0; i < n; ++i) z += std::exp(static_cast<double>(logits[i]) - mx);
  return static_cast<double>(logits[target]) - mx - std::log(z);
}

namespace {

// log-softmax of logits[n] in double.
void log_softmax(const float *logits, int32_t n, std::vector<double> *out) {
  out->resize(static_cast<size_t>(n));
  double mx = logits[0];
  for (int32_t i = 1; i < n; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
  double z = 0;
  for (int32_t i = 0; i < n; ++i) z += std::exp(static_cast<double>(logits[i]) - mx);
  const double lz = std::log(z) + mx;
  for (int32_t i = 0; i < n; ++i) (*out)[static_cast<size_t>(i)] = static_cast<double>(logits[i]) - lz;
}

// KL(ref || got) of two logit rows, in nats (lp, lq: scratch).
double kl_of(const float *ref, const float *got, int32_t V, std::vector<double> &lp, std::vector<double> &lq) {
  log_softmax(ref, V, &lp);
  log_softmax(got, V, &lq);
  double kl = 0;
  for (int32_t v = 0; v < V; ++v) kl += std::exp(lp[static_cast<size_t>(v)]) * (lp[static_cast<size_t>(v)] - lq[static_cast<size_t>(v)]);
  return std::max(0.0, kl);
}

// What a side-by-side run measured for each session: session 0 is the reference.
struct SideBySide {
  std::vector<double> nll, kl_sum, kl_max;
  std::vector<int64_t> agree;
};

// The text fed into every session in chunks of `chunk` tokens, side by side so that no logits are kept: the negative
// log-likelihood of each session, and for sessions 1.. KL(session 0 || session) of every next-token distribution, its
// maximum and top-1 agreement. before_step(s) runs before session s's step (a process-wide setting to switch).
SideBySide side_by_side(std::vector<std::unique_ptr<Session>> &sessions, const std::vector<int32_t> &seqs,
                        const std::vector<int32_t> &toks, size_t chunk, int32_t V,
                        const std::function<void(size_t)> &before_step) {
  const size_t n_items = toks.size() - 1, ns = sessions.size();
  SideBySide r{std::vector<double>(ns, 0.0), std::vector<double>(ns, 0.0), std::vector<double>(ns, 0.0),
               std::vector<int64_t>(ns, 0)};
  std::vector<double> lp, lq;
  std::vector<float> ref;
  const auto top = [V](const float *x) { return std::max_element(x, x + V) - x; };
  for (size_t c0 = 0; c0 < n_items; c0 += chunk) {
    const size_t c1 = std::min(n_items, c0 + chunk);
    for (size_t s = 0; s < ns; ++s) {
      std::vector<BatchToken> batch;
      for (size_t i = c0; i < c1; ++i) batch.push_back({seqs[s], toks[i], true});
      if (before_step) before_step(s);
      sessions[s]->decode(batch);
      const std::vector<float> &lg = sessions[s]->batch_logits();
      if (s == 0) ref = lg;
      for (size_t i = c0; i < c1; ++i) {
        const float *rf = ref.data() + (i - c0) * static_cast<size_t>(V), *g = lg.data() + (i - c0) * static_cast<size_t>(V);
        r.nll[s] -= log_prob(g, V, toks[i + 1]);
        if (s == 0) continue;
        const double kl = kl_of(rf, g, V, lp, lq);
        r.kl_sum[s] += kl;
        r.kl_max[s] = std::max(r.kl_max[s], kl);
        r.agree[s] += top(rf) == top(g) ? 1 : 0;
      }
    }
  }
  return r;
}

// The text fed under f32 activations and under the integer ones (int8, int16), each in a session of its own (so each
// cache holds what that arithmetic computed): one token at a time as decode runs (chunk 1), or in chunks of ubatch
// tokens as prefill runs. KL(f32 || int) of every next-token distribution, top-1 agreement, and the perplexities.
// The setting is process-wide, so it is set before each session's step and restored on any exit.
int compare_activations(const std::shared_ptr<const Model> &model, const SessionOptions &so, const std::vector<int32_t> &toks,
                        size_t chunk, bool json) {
  const size_t n_items = toks.size() - 1;
  constexpr int kModes = 3;
  const CpuActivations modes[kModes] = {CpuActivations::f32, CpuActivations::int8, CpuActivations::int16};
  const char *names[kModes] = {"f32", "int8", "int16"};
  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<int32_t> seqs;
  for (int mode = 0; mode < kModes; ++mode) {
    sessions.push_back(std::make_unique<Session>(model, so));
    seqs.push_back(sessions.back()->add_sequence());
  }
  const CpuActivations before = cpu_activations();
  SideBySide r;
  try {
    r = side_by_side(sessions, seqs, toks, chunk, model->hparams().n_vocab,
                     [&modes](size_t s) { set_cpu_activations(modes[s]); });
  } catch (...) {
    set_cpu_activations(before);
    throw;
  }
  set_cpu_activations(before);
  const double n = static_cast<double>(n_items);
  const bool fast = cpu_has_avx512_vnni();
  if (json) {
    JsonObject o;
    o.integer("tokens", static_cast<int64_t>(n_items)).integer("chunk", static_cast<int64_t>(chunk))
        .num("ppl_f32", std::exp(r.nll[0] / n)).boolean("int_kernels", fast);
    for (size_t mode = 1; mode < kModes; ++mode) {
      const std::string m = names[mode];
      o.num("kl_mean_" + m, r.kl_sum[mode] / n).num("kl_max_" + m, r.kl_max[mode])
          .num("top1_" + m, static_cast<double>(r.agree[mode]) / n).num("ppl_" + m, std::exp(r.nll[mode] / n));
    }
    std::printf("%s\n", o.dump().c_str());
  } else {
    if (chunk == 1) std::printf("tokens %zu, one at a time (as decode runs)", n_items);
    else std::printf("tokens %zu, in chunks of %zu (as prefill runs)", n_items, chunk);
    std::printf("; perplexity with f32 activations %.4f%s\n", std::exp(r.nll[0] / n),
                fast ? "" : " (this CPU has no AVX-512 VNNI: every mode ran f32)");
    for (size_t mode = 1; mode < kModes; ++mode)
      std::printf("  %-5s  KL(f32 || %s) mean %.3g max %.3g  top-1 agreement %.4f  perplexity %.4f\n", names[mode],
                  names[mode], r.kl_sum[mode] / n, r.kl_max[mode], static_cast<double>(r.agree[mode]) / n,
                  std::exp(r.nll[mode] / n));
  }
  return 0;
}

// The text fed in chunks of ubatch tokens, as prefill runs, into one session per KV dtype (the reference so.kv_dtype
// first, then each of `dtypes`): KL(reference || dtype) of every next-token distribution, top-1 agreement and
// perplexity. Each session's attention reads the K/V its cache stored, so the loss is what that dtype costs a real run.
int compare_kv_dtypes(const std::shared_ptr<const Model> &model, const SessionOptions &so, const std::vector<int32_t> &toks,
                      const std::vector<KvDtype> &dtypes, bool json) {
  const size_t n_items = toks.size() - 1, nd = dtypes.size() + 1;
  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<int32_t> seqs;
  for (size_t d = 0; d < nd; ++d) {
    SessionOptions o = so;
    if (d > 0) o.kv_dtype = dtypes[d - 1];
    sessions.push_back(std::make_unique<Session>(model, o));
    seqs.push_back(sessions.back()->add_sequence());
  }
  const size_t chunk = static_cast<size_t>(so.ubatch);
  const SideBySide r = side_by_side(sessions, seqs, toks, chunk, model->hparams().n_vocab, nullptr);
  const double n = static_cast<double>(n_items);
  const std::string rn = kv_dtype_name(so.kv_dtype);
  if (json) {
    JsonObject o;
    o.integer("tokens", static_cast<int64_t>(n_items)).str("reference", rn).num("ppl_" + rn, std::exp(r.nll[0] / n));
    for (size_t d = 1; d < nd; ++d) {
      const std::string m = kv_dtype_name(dtypes[d - 1]);
      o.num("kl_mean_" + m, r.kl_sum[d] / n).num("kl_max_" + m, r.kl_max[d]).num("top1_" + m, static_cast<double>(r.agree[d]) / n)
          .num("ppl_" + m, std::exp(r.nll[d] / n));
    }
    std::printf("%s\n", o.dump().c_str());
  } else {
    std::printf("tokens %zu in chunks of %zu; perplexity with a %s cache %.4f\n", n_items, chunk, rn.c_str(), std::exp(r.nll[0] / n));
    for (size_t d = 1; d < nd; ++d) {
      const char *m = kv_dtype_name(dtypes[d - 1]);
      std::printf("  %-5s  KL(%s || %s) mean %.3g max %.3g  top-1 agreement %.4f  perplexity %.4f\n", m, rn.c_str(), m,
                  r.kl_sum[d] / n, r.kl_max[d], static_cast<double>(r.agree[d]) / n, std::exp(r.nll[d] / n));
    }
  }
  return 0;
}

}  // namespace

int cmd_perplexity(int argc, char **argv) {
  std::set<std::string> valued = {"model", "file", "max-tokens", "activations", "kv-compare"};
  for (const auto &n : session_option_names()) valued.insert(n);
  Args a(argc, argv, 2, valued, {"json"});
  const std::string path = model_path_from(a);
  const std::string text = read_file(a.required("file"));
  const int64_t max_tokens = a.integer("max-tokens", 0, 0, INT64_MAX);
  SessionOptions so = session_options_from(a);
  if (a.has("profile")) fail(Status::invalid_argument, "perplexity runs with the full cache; --profile is for generate, chat and eval");
  if (so.compression.enabled()) fail(Status::invalid_argument, "perplexity runs with the full cache; use 'infokv eval' for compression");
  auto model = Model::load(path);
  const Tokenizer &tok = model->tokenizer();
  std::vector<int32_t> ids = tok.encode(text, false);
  if (max_tokens > 0 && static_cast<int64_t>(ids.size()) > max_tokens) ids.resize(static_cast<size_t>(max_tokens));
  if (ids.empty()) fail(Status::invalid_argument, "the file has no tokens");
  std::vector<int32_t> seq_tokens;
  if (tok.bos() >= 0) seq_tokens.push_back(tok.bos());
  seq_tokens.insert(seq_tokens.end(), ids.begin(), ids.end());
  // Size the pool for the whole text unless the user chose a size.
  if (so.kv_pool_blocks == 0 && so.kv_pool_bytes == 0) {
    const int64_t per_layer = (static_cast<int64_t>(seq_tokens.size()) + so.block_size - 1) / so.block_size + 1;
    so.kv_pool_blocks = per_layer * model->hparams().n_layer;
  }
  if (a.has("kv-compare")) {
    std::vector<KvDtype> dts;
    for (const std::string &d : split_list(a.str("kv-compare"))) {
      KvDtype t;
      if (!kv_dtype_parse(d.c_str(), &t)) fail(Status::invalid_argument, std::string("--kv-compare takes ") + kKvDtypeNames + ", not '" + d + "'");
      dts.push_back(t);
    }
    if (dts.empty()) fail(Status::invalid_argument, "--kv-compare needs at least one KV dtype");
    return compare_kv_dtypes(model, so, seq_tokens, dts, a.flag("json"));
  }
  const std::string act = a.str("activations", "");
  if (act == "compare") return compare_activations(model, so, seq_tokens, 1, a.flag("json"));
  if (act == "compare-prefill") return compare_activations(model, so, seq_tokens, static_cast<size_t>(so.ubatch), a.flag("json"));
  if (act == "f32") set_cpu_activations(CpuActivations::f32);
  else if (act == "int8") set_cpu_activations(CpuActivations::int8);
  else if (act == "int16") set_cpu_activations(CpuActivations::int16);
  else if (!act.empty()) fail(Status::invalid_argument, "--activations takes f32, int8, int16, compare or compare-prefill, not '" + act + "'");
  Session session(model, so);
  const int32_t seq = session.add_sequence();
  const int32_t V = model->hparams().n_vocab;
  double nll = 0;
  int64_t count = 0;
  // Item i's logits predict token i + 1, so the last token is never fed.
  const size_t chunk = static_cast<size_t>(so.ubatch);
  const size_t n_items = seq_tokens.size() - 1;  // items whose logits predict a kept token
  for (size_t c0 = 0; c0 < n_items; c0 += chunk) {
    const size_t c1 = std::min(n_items, c0 + chunk);
    std::vector<BatchToken> batch;
    for (size_t i = c0; i < c1; ++i) batch.push_back({seq, seq_tokens[i], true});
    session.decode(batch);
    const std::vector<float> &lg = session.batch_logits();
    for (size_t i = c0; i < c1; ++i) {
      nll -= log_prob(lg.data() + (i - c0) * static_cast<size_t>(V), V, seq_tokens[i + 1]);
      ++count;
    }
  }
  if (count == 0) fail(Status::invalid_argument, "need at least two tokens (the model has no BOS token)");
  const double mean = nll / static_cast<double>(count);
  if (a.flag("json")) {
    JsonObject o;
    o.integer("tokens", count).num("mean_nll", mean).num("ppl", std::exp(mean));
    std::printf("%s\n", o.dump().c_str());
  } else {
    std::printf("tokens %lld  mean NLL %.6f  perplexity %.4f\n", static_cast<long long>(count), mean, std::exp(mean));
  }
  return 0;
}

}  // namespace cli
}  // namespace infokv
