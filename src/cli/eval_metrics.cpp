#include "cli/eval_metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "cli/args.hpp"
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

double mean_kl(const std::vector<float> &full, const std::vector<float> &compressed, int64_t M, int32_t V) {
  double kl = 0;
  for (int64_t t = 0; t < M; ++t) kl += kl_divergence(full.data() + t * V, compressed.data() + t * V, V);
  return kl / static_cast<double>(M);
}

std::vector<double> fraction_list(const std::string &s, const char *cmd) {
  std::vector<double> out;
  for (const auto &b : split_list(s)) {
    double fr;
    int32_t tk;
    parse_budget(b, &fr, &tk);
    if (tk > 0) fail(Status::invalid_argument, std::string(cmd) + " budgets are fractions of the prefix (e.g. 0.25 or 25%)");
    out.push_back(fr);
  }
  return out;
}

std::vector<double> positive_list(const std::string &s, const char *what, const char *hint) {
  std::vector<double> out;
  for (const auto &e : split_list(s)) {
    char *end = nullptr;
    const double v = std::strtod(e.c_str(), &end);
    if (end == e.c_str() || *end != '\0' || !(v > 0 && std::isfinite(v)))
      fail(Status::invalid_argument, std::string(what) + " takes positive numbers" + (hint ? std::string(" (") + hint + ")" : "") +
                                         ", got '" + e + "'");
    out.push_back(v);
  }
  return out;
}

SessionOptions compress_on_demand(const SessionOptions &base, PolicyKind policy) {
  SessionOptions so = base;
  so.compression.policy = policy;
  so.compression.budget_fraction = 1.0;
  so.compression.budget_tokens = 0;
  so.compression.compress_after_prefill = false;
  so.compression.interval = INT32_MAX;
  return so;
}

int32_t budget_tokens(double fraction, int64_t N) {
  return static_cast<int32_t>(std::max<int64_t>(1, std::llround(fraction * static_cast<double>(N))));
}

std::vector<int32_t> EvalWindows::window(int64_t w) const {
  std::vector<int32_t> seq;
  if (bos >= 0) seq.push_back(bos);
  const auto from = text.begin() + offset + w * (N + M);
  seq.insert(seq.end(), from, from + (N + M + (bos >= 0 ? 0 : 1)));
  return seq;
}

EvalWindows eval_windows(const Tokenizer &tok, const std::string &text, int64_t N, int64_t M, int64_t count,
                         int64_t offset) {
  EvalWindows w;
  w.text = tok.encode(text, false);
  w.bos = tok.bos();
  w.N = N;
  w.M = M;
  w.offset = offset;
  w.count = count;
  if (static_cast<int64_t>(w.text.size()) < w.need())
    fail(Status::invalid_argument, "the text has " + std::to_string(w.text.size()) + " tokens; " + std::to_string(count) +
                                       " window(s) of prefix " + std::to_string(N) + " + continuation " + std::to_string(M) +
                                       " from offset " + std::to_string(offset) + " need " + std::to_string(w.need()));
  return w;
}

void size_eval_pool(SessionOptions &so, const Model &model, int64_t N, int64_t M, int64_t sequences) {
  if (so.kv_pool_blocks != 0 || so.kv_pool_bytes != 0) return;
  const int64_t per_seq = (N + M + 1 + so.block_size - 1) / so.block_size + 1;
  so.kv_pool_blocks = per_seq * model.hparams().n_layer * sequences;
}

int32_t decode_prefix(Session &s, const std::vector<int32_t> &seq, int64_t N) {
  const int32_t id = s.add_sequence();
  std::vector<BatchToken> pre;
  for (int64_t i = 0; i < N; ++i) pre.push_back({id, seq[static_cast<size_t>(i)], false});
  s.decode(pre);
  return id;
}

std::vector<float> teacher_force(Session &s, int32_t id, const std::vector<int32_t> &seq, int64_t N, int64_t M) {
  std::vector<BatchToken> cont;
  for (int64_t i = N; i < N + M; ++i) cont.push_back({id, seq[static_cast<size_t>(i)], true});
  s.decode(cont);
  return s.batch_logits();
}

ContinuationRun run_full_cache(const std::shared_ptr<const Model> &model, const SessionOptions &base,
                               const std::vector<int32_t> &seq, int64_t N, int64_t M) {
  SessionOptions so = base;
  so.compression = CompressionConfig{};
  Session s(model, so);
  const int32_t id = decode_prefix(s, seq, N);
  ContinuationRun r;
  r.kv_bytes = s.info(id).bytes;
  r.logits = teacher_force(s, id, seq, N, M);
  return r;
}

namespace {

void set_max_loss(Session &s, double max_loss) {
  CompressionConfig c = s.compressor().config();
  c.max_loss = max_loss;
  s.compressor().set_config(c);
}

}  // namespace

ContinuationRun run_compressed_fork(Session &s, int32_t id, const std::vector<int32_t> &seq, int64_t N, int64_t M,
                                    int32_t budget, double max_loss, const std::function<void(int32_t)> &before,
                                    const std::function<void(int32_t)> &after) {
  const int32_t f = s.fork_sequence(id);
  if (before) before(f);
  if (max_loss > 0) set_max_loss(s, max_loss);
  s.compressor().compress(f, budget);
  if (max_loss > 0) set_max_loss(s, 0);
  if (after) after(f);
  ContinuationRun r;
  r.kv_bytes = s.info(f).bytes;
  r.logits = teacher_force(s, f, seq, N, M);
  s.remove_sequence(f);
  return r;
}

std::vector<int32_t> greedy_answer(Session &s, int32_t seq, int32_t max_answer, std::vector<float> *logits) {
  const Tokenizer &tok = s.model().tokenizer();
  std::vector<int32_t> out;
  for (int32_t i = 0; i < max_answer; ++i) {
    const std::vector<float> &lg = s.logits(seq);
    const int32_t next = argmax(lg.data(), static_cast<int32_t>(lg.size()));
    if (tok.is_eog(next)) break;
    if (logits != nullptr) logits->insert(logits->end(), lg.begin(), lg.end());
    out.push_back(next);
    s.decode({{seq, next, false}});
  }
  return out;
}

}  // namespace cli
}  // namespace infokv
