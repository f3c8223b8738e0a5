// Policy h2o (Heavy-Hitter Oracle): each token's attention accumulated over every query that has seen it, as a
// mean per query (the forward pass records the sums and counts in the layer's slot channels).
#include <cmath>
#include <vector>

#include "compress/policy_table.hpp"
#include "compress/scores.hpp"

namespace infokv {

std::vector<float> h2o_scores(const CompressionConfig &, const LayerScoreInput &in, int32_t n_cand, int32_t) {
  const LayerSlots &S = *in.slots;
  std::vector<float> score(static_cast<size_t>(n_cand), 0.0f);
  for (int32_t j = 0; j < n_cand; ++j) {
    const float cnt = S.channels[kChanAttnCount][static_cast<size_t>(j)];
    score[static_cast<size_t>(j)] = cnt > 0 ? S.channels[kChanAttnSum][static_cast<size_t>(j)] / cnt : 0.0f;
  }
  return score;
}

}  // namespace infokv
