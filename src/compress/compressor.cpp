// Session::compress: scores every cached token of every layer under the configured policy and keeps the best
// within the budget (DESIGN.md §4), then compacts the cache so the memory returns to the pool.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "compress/scores.hpp"
#include "session/session.hpp"
#include "util/error.hpp"

namespace infokv {

int32_t Session::budget_for(int32_t seq) const {
  const CompressionConfig &c = opts_.compression;
  if (c.budget_tokens > 0) return c.budget_tokens;
  const int64_t len = kv_->seq(seq).length;
  return static_cast<int32_t>(std::max<int64_t>(1, std::llround(c.budget_fraction * static_cast<double>(len))));
}

void Session::compress(int32_t seq, int32_t budget_tokens) {
  const CompressionConfig &c = opts_.compression;
  if (!c.enabled()) fail(Status::bad_state, "compression policy is 'none'");
  SeqState &st = state(seq);
  const SeqCache &sc = kv_->seq(seq);
  const int32_t B = budget_tokens > 0 ? budget_tokens : budget_for(seq);
  const HParams &hp = model_->hparams();
  std::vector<int32_t> counts;
  for (const LayerSlots &L : sc.layers) counts.push_back(L.n());
  std::vector<int32_t> budgets = layer_budgets(c, counts, B);
  // Memory is held in whole blocks: a budget that would leave its last block a quarter full or less drops those
  // few tokens instead of paying a whole block for them (at most block_size / 4 tokens per layer).
  const int32_t bs = kv_->config().block_size;
  for (int32_t &b : budgets) {
    const int32_t r = b % bs;
    if (b > bs && r > 0 && r <= bs / 4) b -= r;
  }
  const bool prefill = st.n_compressions == 0;
  std::vector<std::vector<int32_t>> keep(sc.layers.size());
  bool any = false;
  for (int32_t l = 0; l < hp.n_layer; ++l) {
    const LayerSlots &L = sc.layers[static_cast<size_t>(l)];
    LayerScoreInput in;
    in.kv = kv_->view(seq, l);
    in.slots = &L;
    in.window_q = &sc.window_q[static_cast<size_t>(l)];
    in.window_pos = &sc.window_pos;
    in.n_heads = hp.n_head;
    in.head_dim = hp.head_dim;
    in.prefill = prefill;
    in.spans = &st.spans;
    in.window_probs = [this](float *out, const float *q, const int32_t *vis, int32_t rows, const cpu::PagedKv &kv, int32_t n_heads,
                             float scale) { device_->window_probs(out, q, vis, rows, kv, n_heads, scale); };
    keep[static_cast<size_t>(l)] = select_keep(c, in, budgets[static_cast<size_t>(l)]);
    any = any || static_cast<int32_t>(keep[static_cast<size_t>(l)].size()) < L.n();
  }
  if (any) kv_->compact(seq, keep);
  ++st.n_compressions;
  st.since_compress = 0;
}

}  // namespace infokv
