// Session accounting and limits kept apart from session.cpp (decoding): host memory per sequence and the cap on
// sequences.
#include <string>

#include "session/session.hpp"
#include "util/error.hpp"

namespace infokv {

KvStats Session::kv_stats() const {
  KvStats s = kv_->stats();
  for (const auto &kv : seqs_) {
    const SeqState &st = kv.second;
    // A std::map node (the pair and about four pointers of tree links) and the vectors' buffers.
    s.host_bytes += static_cast<int64_t>(sizeof(std::pair<const int32_t, SeqState>) + 4 * sizeof(void *) +
                                         st.tokens.capacity() * sizeof(int32_t) + st.logits.capacity() * sizeof(float) +
                                         st.spans.capacity() * sizeof(ProtectedSpan));
  }
  return s;
}

void Session::check_room_for_sequences(int64_t n) const {
  if (sequence_count() + n > opts_.max_sequences)
    fail(Status::out_of_range, "the session holds " + std::to_string(sequence_count()) + " sequences; " +
                                   std::to_string(n) + " more would pass max_sequences (" +
                                   std::to_string(opts_.max_sequences) + ")");
}

}  // namespace infokv
