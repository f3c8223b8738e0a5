// Policies snapkv and pyramidkv: the attention the observation window's queries pay each token, pooled over
// neighbouring positions. pyramidkv scores the same way; what differs is its per-layer budgets (layer_budgets).
#include <algorithm>
#include <cmath>
#include <vector>

#include "compress/policy_table.hpp"
#include "compress/scores.hpp"

namespace infokv {

std::vector<float> snapkv_scores(const CompressionConfig &c, const LayerScoreInput &in, int32_t n_cand, int32_t w) {
  const std::vector<float> a = window_attention(in, n_cand, std::max(w, 1));
  return pool_and_normalise(a, pool_kernel(c, in));
}

}  // namespace infokv
