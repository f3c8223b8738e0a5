// kvzip (Kim et al., "KVzip: Query-Agnostic KV Cache Compression with Context Reconstruction", arXiv:2505.23416):
// a token's score is the most attention any head gives it while the model re-reads the context after a "repeat the
// previous context" prompt (Session::replay_evidence). It needs no question, so it suits a cache that will be asked
// something later (a chat's history, a saved snapshot), at the cost of one more pass over the context.
#include "compress/policy_table.hpp"
#include "compress/scores.hpp"
#include "util/error.hpp"

namespace infokv {

std::vector<float> kvzip_scores(const CompressionConfig &, const LayerScoreInput &in, int32_t n_cand, int32_t) {
  if (in.replay == nullptr || static_cast<int32_t>(in.replay->size()) < n_cand)
    fail(Status::internal, "kvzip scores need the context replay of every slot");
  return std::vector<float>(in.replay->begin(), in.replay->begin() + n_cand);
}

}  // namespace infokv
