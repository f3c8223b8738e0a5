// What `infokv eval` and `infokv tune` share: distribution comparisons, their option lists, the text's windows and
// the measurement itself (a full-cache reference, and forks of a full-cache prefix compressed and teacher-forced).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/model.hpp"
#include "session/session.hpp"

namespace infokv {
namespace cli {

double log_prob(const float *logits, int32_t n, int32_t target);
// KL(p || q) in nats between softmax(p_logits) and softmax(q_logits).
double kl_divergence(const float *p_logits, const float *q_logits, int32_t n);
int32_t argmax(const float *v, int32_t n);
// Mean over the M continuation rows of KL(full || compressed); both [M, V].
double mean_kl(const std::vector<float> &full, const std::vector<float> &compressed, int64_t M, int32_t V);

// Budgets as fractions of the prefix ("0.25" or "25%"); `cmd` names the command in the error for token counts.
std::vector<double> fraction_list(const std::string &s, const char *cmd);
// Positive finite numbers from a comma list; `what` names the option in the error, `hint` (if any) what they mean.
std::vector<double> positive_list(const std::string &s, const char *what, const char *hint = nullptr);
// Tokens per layer for a budget fraction of an N-token prefix (at least 1).
int32_t budget_tokens(double fraction, int64_t N);

// The windows measured: window w is [BOS] + the text's tokens from offset + w (N + M), N + M of them (one more
// without a BOS), so that the continuation seq[N:N+M] predicts seq[N+1..N+M].
struct EvalWindows {
  std::vector<int32_t> text;  // every token of the text
  int32_t bos = -1;
  int64_t N = 0, M = 0, offset = 0, count = 0;
  int64_t need() const { return offset + count * (N + M) + (bos >= 0 ? 0 : 1); }  // tokens the windows read
  std::vector<int32_t> window(int64_t w) const;
};
// Throws invalid_argument when the text has fewer tokens than the windows read.
EvalWindows eval_windows(const Tokenizer &tok, const std::string &text, int64_t N, int64_t M, int64_t count,
                         int64_t offset);

// `base` with `policy` compressing only when the caller calls Compressor::compress: a budget of the whole sequence, no
// compression after a prefill, none on the decode interval.
SessionOptions compress_on_demand(const SessionOptions &base, PolicyKind policy);

// When the options size no pool: blocks for `sequences` sequences of N + M tokens in every layer.
void size_eval_pool(SessionOptions &so, const Model &model, int64_t N, int64_t M, int64_t sequences);

// A continuation's logits [M, V] and the KV bytes the prefix held when it started.
struct ContinuationRun {
  std::vector<float> logits;
  int64_t kv_bytes = 0;
};

// Greedy answer of `seq` from its current logits, until an end-of-generation token or max_answer tokens (each
// decoded into the sequence); `logits` (when not null) receives the distribution that chose each answer token,
// [answer size, V] (the end-of-generation step is not scored).
std::vector<int32_t> greedy_answer(Session &s, int32_t seq, int32_t max_answer, std::vector<float> *logits = nullptr);

// Decodes seq[0:N] into a new sequence of `s` as one batch and returns its id.
int32_t decode_prefix(Session &s, const std::vector<int32_t> &seq, int64_t N);
// Teacher-forces seq[N:N+M] on sequence `id`; returns the continuation's logits [M, V].
std::vector<float> teacher_force(Session &s, int32_t id, const std::vector<int32_t> &seq, int64_t N, int64_t M);
// The reference: the continuation with the full cache (base's compression off).
ContinuationRun run_full_cache(const std::shared_ptr<const Model> &model, const SessionOptions &base,
                               const std::vector<int32_t> &seq, int64_t N, int64_t M);
// Fork -> compress -> teacher-force: forks `id` (holding seq[0:N]), calls before(fork) when given, compresses the
// fork to `budget` tokens per layer (max_loss > 0: under that quality target, budget 0), calls after(fork) when
// given, teacher-forces seq[N:N+M] and removes the fork.
ContinuationRun run_compressed_fork(Session &s, int32_t id, const std::vector<int32_t> &seq, int64_t N, int64_t M,
                                    int32_t budget, double max_loss,
                                    const std::function<void(int32_t)> &before = nullptr,
                                    const std::function<void(int32_t)> &after = nullptr);

}  // namespace cli
}  // namespace infokv
