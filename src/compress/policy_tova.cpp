// Policy tova (Token Omission Via Attention): the attention the last query pays each token; it keeps the last token.
#include <cmath>
#include <vector>

#include "compress/policy_table.hpp"
#include "compress/scores.hpp"

namespace infokv {

std::vector<float> tova_scores(const CompressionConfig &, const LayerScoreInput &in, int32_t n_cand, int32_t) {
  return window_attention(in, n_cand, 1);
}

}  // namespace infokv
