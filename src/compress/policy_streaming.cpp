// Policy streaming (StreamingLLM): the first `sink` tokens and the most recent ones. Its score is only an order:
// sinks first, then later tokens before earlier ones; it keeps no observation window.
#include <cmath>
#include <vector>

#include "compress/policy_table.hpp"
#include "compress/scores.hpp"

namespace infokv {

std::vector<float> streaming_scores(const CompressionConfig &c, const LayerScoreInput &, int32_t n_cand, int32_t) {
  std::vector<float> score(static_cast<size_t>(n_cand), 0.0f);
  for (int32_t j = 0; j < n_cand; ++j) score[static_cast<size_t>(j)] = j < c.sink ? INFINITY : static_cast<float>(j);
  return score;
}

}  // namespace infokv
