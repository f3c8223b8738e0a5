// Scorers and selection for the compression policies. Free functions so tests can compare each with a naive
// reference on small random cases.
#pragma once
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "compress/channels.hpp"
#include "compress/policy.hpp"
#include "kernels/ops.hpp"
#include "kv/kv_cache.hpp"

namespace infokv {

// Attention probabilities of window query rows over a layer's cached slots, with DeviceForward::window_probs's
// contract (out[rows, kv.n_slots], row r over slots [0, vis[r])): how a backend scores its own KV pool.
using WindowProbsFn = std::function<void(float *out, const float *q, const int32_t *vis, int32_t rows, const PagedKv &kv,
                                         int32_t n_heads, float scale)>;

struct LayerScoreInput {
  PagedKv kv{};
  const LayerSlots *slots = nullptr;
  const std::vector<float> *window_q = nullptr;   // rows of n_heads * head_dim, oldest first
  const std::vector<int32_t> *window_pos = nullptr;
  int32_t n_heads = 0;
  int32_t head_dim = 0;
  bool prefill = true;
  const std::vector<ProtectedSpan> *spans = nullptr;
  WindowProbsFn window_probs;  // empty: cpu::attention_probs_mean on kv (host memory)
  // Context replay (kvzip): per slot, the most attention any head of a replayed query gave it (null: not replayed).
  const std::vector<float> *replay = nullptr;
  // The last probe_rows rows of window_q / window_pos are a probe question's (Question::later or both): they are
  // read beside the window's latest rows, whatever the window's size.
  int32_t probe_rows = 0;
};

// Observation window size for a layer budget: configured, or min(32, budget / 4); always < budget.
int32_t window_size(const CompressionConfig &c, int32_t budget);

// Per-layer budgets (tokens kept per layer) for layers holding counts[l] tokens, average `budget`.
std::vector<int32_t> layer_budgets(const CompressionConfig &c, const std::vector<int32_t> &counts, int32_t budget);

// A global spread of the blocks `budgets` hold (kvpress's KVzip with layerwise=False): every layer's slots are
// ranked together by score[l][j] (one per slot; a score of +infinity is always kept: the window, protected spans),
// the best sum_l min(budgets[l], counts[l]) slots anywhere win, and each layer gets the whole blocks of size bs that
// its winners fill: at least one block (or all it holds, if less), never more than it holds, and the same number of
// blocks in all as the uniform budgets take. Returns the per-layer budgets, in tokens (a multiple of bs, or counts[l]).
// Scores must be comparable across layers (kvzip's: attention probabilities). Ties go to the later slot, then the
// later layer, so the result is deterministic.
std::vector<int32_t> global_layer_budgets(const std::vector<std::vector<float>> &score, const std::vector<int32_t> &counts,
                                          const std::vector<int32_t> &budgets, int32_t bs);

// The pooling kernel of a layer's attention evidence: the configured prefill or decode kernel for the window's own
// queries; at least defaults::pool_kernel_probe when a probe question's rows are read (Question::later, both).
int32_t pool_kernel(const CompressionConfig &c, const LayerScoreInput &in);

// 1-D average pooling with zero padding counted (kernel odd), then normalised to sum 1.
std::vector<float> pool_and_normalise(const std::vector<float> &a, int32_t kernel);

// Attention each of the first n_cand slots receives from the last `w` window queries (mean over queries and
// heads). Query rows whose positions are not in the cache are ignored.
std::vector<float> window_attention(const LayerScoreInput &in, int32_t n_cand, int32_t w);

// Question::both: the window's scores and the probe's combined so that what either ranks high is kept: each
// candidate's score is the larger of its rank quantiles in a and in b (1 for the best of either, 1/n for the worst;
// equal scores share a quantile). a and b have the same size.
std::vector<float> rank_max(const std::vector<float> &a, const std::vector<float> &b);

// The InfoKV mix: alpha * A + (1 - alpha) * softmax((D + tau) * H) over the candidates.
std::vector<float> infokv_mix(const std::vector<float> &attn, const std::vector<float> &rep_change,
                              const std::vector<float> &entropy, float alpha, float tau);

// The observation window a fixed policy always keeps and scores with (its row's WindowRule: the configured one,
// TOVA's last token, none for StreamingLLM), at most n.
int32_t policy_window(const CompressionConfig &c, int32_t budget, int32_t n);
// The latest tokens every layer keeps as the window, which protection and a snapshot's saved window rows count: the
// policy's window, with StreamingLLM's recent tokens counted as a configured window.
int32_t kept_window(const CompressionConfig &c, int32_t budget);

// A fixed policy's score for each of the first n_cand slots (higher: keep), w being its window: the scorer of its
// row in the policy table (compress/policy_<name>.cpp). Throws Error(internal) for none and auto, which have no
// score of their own.
std::vector<float> policy_scores(const CompressionConfig &c, const LayerScoreInput &in, int32_t n_cand, int32_t w);

// The selection every policy shares: keeps the last w slots, the never-evicted spans, and the best of the other
// candidates by `score` (one per slot before the window) up to `budget`, fair spans each keeping the same fraction.
// evicted_share as in select_keep (count_tokens: every candidate weighs 1, for scores that are only an order).
std::vector<int32_t> select_with_scores(const LayerScoreInput &in, int32_t budget, int32_t w, const std::vector<float> &score,
                                        bool count_tokens, double *evicted_share = nullptr);

// The share of the candidates' score mass (score: one per candidate, the first score.size() slots) that the
// candidates missing from `keep` (ascending slot indices) hold: select_keep's evicted_share. count_tokens: every
// candidate (and any with a non-finite score) weighs 1.
double dropped_share(const std::vector<float> &score, const std::vector<int32_t> &keep, bool count_tokens);

// Slot indices (ascending) that a layer keeps under `budget`. When `evicted_share` is given it receives what the
// eviction costs by the policy's own measure: the share of the candidates' score mass that is dropped (for
// streaming, whose score is only an order, the share of candidates dropped); 0 when nothing is dropped.
std::vector<int32_t> select_keep(const CompressionConfig &c, const LayerScoreInput &in, int32_t budget,
                                 double *evicted_share = nullptr);

// The slots [first, second) of the first n of `pos` (ascending positions) that lie in `span`: one binary search,
// not a scan per span.
std::pair<int32_t, int32_t> span_slots(const std::vector<int32_t> &pos, int32_t n, const ProtectedSpan &span);

// Memory is held in whole blocks: a layer budget of b tokens that would leave its last block of bs a quarter full or
// less drops those few tokens instead of paying a whole block for them (at most bs / 4 tokens per layer).
int32_t whole_block_budget(int32_t b, int32_t bs);

// Top-k of scores restricted to `allowed` indices: highest score first, ties to the later index. Returns indices.
std::vector<int32_t> top_k_later_ties(const std::vector<float> &scores, const std::vector<int32_t> &allowed, int32_t k);

}  // namespace infokv
