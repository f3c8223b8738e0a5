// Policy infokv: snapkv's pooled window attention mixed with the information channels the forward pass records per
// token (representation change D and predictive entropy H): alpha * A + (1 - alpha) * softmax((D + tau) * H).
#include <cmath>
#include <vector>

#include "compress/policy_table.hpp"
#include "compress/scores.hpp"

namespace infokv {

std::vector<float> infokv_scores(const CompressionConfig &c, const LayerScoreInput &in, int32_t n_cand, int32_t w) {
  const LayerSlots &S = *in.slots;
  const std::vector<float> a = snapkv_scores(c, in, n_cand, w);
  const std::vector<float> d(S.channels[kChanRepChange].begin(), S.channels[kChanRepChange].begin() + n_cand);
  const std::vector<float> h(S.channels[kChanEntropy].begin(), S.channels[kChanEntropy].begin() + n_cand);
  return infokv_mix(a, d, h, c.alpha, c.tau);
}

}  // namespace infokv
