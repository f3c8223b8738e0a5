// The `auto` policy (DESIGN.md §4, "choosing for the user"): per sequence and per layer it chooses which evidence
// ranks the cached tokens and how the budget is spread across layers, from what the running sequence shows, with
// no second forward pass.
//
// The proxy. For each layer, the observation window's last query rows are held out; every kind of evidence ranks
// the candidates using only what comes before them (the other window rows, the accumulated attention, entropy,
// positions, keys), and for every budget on a block grid the held-out rows' attention output is recomputed over the
// kept set and compared with their output over the whole cache:
//
//     loss_l(evidence, b) = sum_{rows, heads} |o_full - o_kept|^2 / sum_{rows, heads} |o_full|^2
//
// (relative squared error of the attention output before the output projection). Kept sets of one ranking are
// nested, so one pass over the candidates in rank order gives the whole curve: the cost is one attention of the
// held-out rows per kind of evidence, about as much as scoring the window once per kind.
//
// The choice. Each layer takes, at each budget, the evidence with the lowest loss; the budget (whole blocks) goes
// to the layers where one more block lowers the loss most (greedy on the lower convex hull), with the same total
// blocks as a uniform budget (or, with a quality target, as few blocks as keep the mean loss at or under it).
// Then each layer's kept set is selected by its evidence recomputed on every window row.
//
// Two guards against trusting a few held-out rows too far, both measured (packaging/docs/quality.md): on stories260K
// over fresh windows, without them the worst corpus x budget reached 1.02x the best fixed policy's KL, with both
// 0.89x. The held-out rows are the most recent queries, not the future ones:
// - a layer keeps at least kAutoLayerFloor of the uniform budget (a layer starved to its window looked cheap to the
//   held-out rows and then cost the continuation most);
//   with a tuning profile (profile.hpp) the floor is kAutoLayerFloor x the budget x the layer's recorded share of the
//   uniform budget clamped to [0.5, 1.5] (SmolLM2, 16 fresh windows of two novels: 0.97-0.99x the KL without it);
// - window attention (SnapKV's evidence, the most reliable single one) ranks a layer unless another evidence lowers
//   the held-out loss by kEvidenceMargin or more, and by kMinLossGain (the smallest of six noisy estimates is biased
//   low; at generous budgets every loss is ~1e-4 and their differences are noise);
// - the uniform spread stays unless the chosen one lowers the summed loss clearly (auto_clearly_better).
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "compress/scores.hpp"

namespace infokv {

// What ranks a layer's tokens. Values are stable (snapshots and the C API report them); append only.
enum class Evidence : int32_t {
  window_attention = 0,       // SnapKV: attention from the observation window, pooled
  infokv = 1,                 // window attention mixed with entropy and representation change (alpha)
  accumulated_attention = 2,  // H2O: mean attention received from every later query
  last_query = 3,             // TOVA: attention from the latest query
  recency = 4,                // StreamingLLM: sink tokens and the most recent
  key_norm = 5,               // small keys draw attention: score = -|k|
  replay = 6,                 // KVzip: the most attention any head gives while the model re-reads the context
};
constexpr int32_t kEvidenceKinds = 7;
constexpr double kAutoLayerFloor = 0.5;
constexpr float kEvidenceMargin = 0.25f;
constexpr float kMinLossGain = 5e-4f;
const char *evidence_name(Evidence e);  // "window_attention", ...; "unknown" outside the enum

struct AutoLayerChoice {
  Evidence evidence = Evidence::window_attention;
  float alpha = 1.0f;     // attention weight in the InfoKV mix (1 when the evidence is not infokv)
  int32_t budget = 0;     // tokens the layer keeps
  float loss = 0.0f;      // the proxy loss at that budget (relative attention-output error, held-out rows)
};

// What auto chose at one compression of one sequence.
struct AutoReport {
  std::vector<AutoLayerChoice> layers;
  double loss = 0.0;         // mean of the layers' proxy losses
  int64_t tokens = 0;        // tokens kept, all layers
  int64_t uniform_tokens = 0;  // what a uniform budget would have kept (0 under a quality target)
  double max_loss = 0.0;     // the quality target it was held to (0: a byte budget)
  bool empty() const { return layers.empty(); }
};

// One layer, as auto sees it: the fixed policies' input plus the layer's keys and values as f32 on the host.
struct AutoLayerInput {
  LayerScoreInput score;
  const float *k = nullptr;  // [n, n_kv_heads, head_dim]
  const float *v = nullptr;
  int32_t n_kv_heads = 0;
  // The same keys and values as a lower precision would hold them (rounded to it and back), or null: the layer is
  // then measured for that precision too (AutoLayerCurves::quant_loss).
  const float *k_low = nullptr, *v_low = nullptr;
};

// One layer's measurement: budgets on the grid (tokens kept, ascending: the always-kept set, every block multiple
// above it, all), the loss of each kind of evidence there, and each kind's final scores over the candidates.
struct AutoLayerCurves {
  int32_t n = 0;             // slots the layer holds
  int32_t window = 0;        // always kept: the last `window` slots
  std::vector<int32_t> grid;
  std::vector<std::vector<float>> loss;    // [evidence][grid]
  std::vector<std::vector<float>> scores;  // [evidence][candidate], from every window row
  // The held-out rows' loss, by the same measure, when the whole layer is held at the lower precision of
  // AutoLayerInput::k_low/v_low (infinite when not measured). Eviction and rounding add their errors about
  // independently, so keeping the grid's budget g at that precision is taken to cost best_loss(g) + quant_loss.
  float quant_loss = INFINITY;
  float best_loss(size_t g, Evidence *which = nullptr) const;
};

// Measures a layer for a compression whose observation window is `window` slots, on a grid of `block_size` (and of
// `low_block_size`, the lower precision's slots a block, where it is measured too: its whole blocks are points).
AutoLayerCurves auto_measure_layer(const CompressionConfig &c, const AutoLayerInput &in, int32_t window, int32_t block_size,
                                   int32_t low_block_size = 0);

// Spreads the budget across layers: a grid index per layer. max_loss > 0: the fewest blocks whose mean loss is at
// or under max_loss; otherwise as low a loss as possible. total_blocks > 0: at most that many blocks in all
// (ceil(budget / block_size) per layer), with or without a target. `floor[l]` is the least budget (tokens) layer l
// may get.
std::vector<size_t> auto_spread(const std::vector<AutoLayerCurves> &layers, int32_t block_size, int64_t total_blocks,
                                double max_loss, const std::vector<int32_t> &floor);

// A layer's place in a spread that also chooses precision: grid index g, held at the lower precision or not.
struct AutoPick {
  size_t g = 0;
  bool low = false;
};
// auto_spread with a second axis: each layer either at the cache's precision (`block_size` slots a block, loss
// best_loss(g)) or at the lower one its curves measured (`low_block_size` slots a block, loss best_loss(g) +
// quant_loss); low_only[l]: layer l is already held at the lower precision (and cannot go back). Byte budget only:
// at most total_blocks blocks, the loss as low as the greedy finds.
std::vector<AutoPick> auto_spread_precision(const std::vector<AutoLayerCurves> &layers, int32_t block_size, int32_t low_block_size,
                                            const std::vector<char> &low_only, int64_t total_blocks,
                                            const std::vector<int32_t> &floor);
// The summed loss of a spread (quant_loss added where a layer is held low).
double auto_spread_loss(const std::vector<AutoLayerCurves> &layers, const std::vector<AutoPick> &at);

// The grid index holding the blocks a uniform budget of `tokens` holds (its last block filled).
size_t auto_uniform_index(const AutoLayerCurves &cv, int32_t tokens, int32_t block_size);

// Whether spread `a` lowers the summed loss below spread `b`'s by more than the proxy can resolve: by a tenth of b's
// and by kMinLossGain per layer.
bool auto_clearly_better(const std::vector<AutoLayerCurves> &layers, const std::vector<size_t> &a, const std::vector<size_t> &b);

// The kept slots of one layer at grid index g with its best evidence there; fills `choice`.
std::vector<int32_t> auto_select_layer(const CompressionConfig &c, const AutoLayerInput &in, const AutoLayerCurves &cv,
                                       size_t g, AutoLayerChoice *choice);

}  // namespace infokv
