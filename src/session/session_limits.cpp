// Session accounting and limits kept apart from session.cpp (decoding): host memory per sequence and the cap on
// sequences.
#include <string>

#include "session/session.hpp"
#include "util/error.hpp"
#include "util/sys_memory.hpp"

namespace infokv {

// A std::map node (the pair and about four pointers of tree links) and the vectors' buffers of a SeqState.
int64_t Session::state_bytes(const SeqState &st) {
  return static_cast<int64_t>(sizeof(std::pair<const int32_t, SeqState>) + 4 * sizeof(void *) +
                              st.tokens.capacity() * sizeof(int32_t) + st.logits.capacity() * sizeof(float));
}

KvStats Session::kv_stats() const {
  KvStats s = kv_->stats();
  for (const auto &kv : seqs_) s.host_bytes += state_bytes(kv.second) + compressor_->host_bytes(kv.first);
  return s;
}

int64_t Session::committed_host_bytes() const {
  int64_t n = kv_stats().host_bytes;
  for (const auto &kv : seqs_) n += kv_->seq_host_bytes_unshared(kv.first) - kv_->seq_host_bytes(kv.first);
  return n;
}

void Session::check_host_memory_for_fork(int32_t src) const {
  const int64_t limit = opts_.host_memory_limit > 0 ? opts_.host_memory_limit : physical_memory_bytes();
  if (limit <= 0) return;  // the OS does not say
  // The fork's worst case: a private copy of everything src holds outside the pool (its windows once it decodes).
  const int64_t cost = kv_->seq_host_bytes_unshared(src) + state_bytes(state(src)) + compressor_->host_bytes(src);
  // On the CPU the KV pool is host memory too (committed as it fills): counted whole.
  const KvStats ks = kv_->stats();
  const int64_t pool = device_name() == "cpu" ? ks.blocks_total * ks.block_bytes : 0;
  const int64_t committed = committed_host_bytes() + pool;
  if (committed + cost > limit)
    fail(Status::out_of_memory,
         "forking sequence " + std::to_string(src) + " could take up to " + std::to_string(cost >> 10) +
             " KiB of host memory (block tables, logits, observation window) on top of the " +
             std::to_string(committed >> 20) + " MiB the session's sequences" + (pool > 0 ? " and its KV pool" : "") +
             " may hold; the limit is " + std::to_string(limit >> 20) + " MiB" +
             (opts_.host_memory_limit > 0 ? "" : " (the machine's physical memory)"));
}

void Session::check_room_for_sequences(int64_t n) const {
  if (sequence_count() + n > opts_.max_sequences)
    fail(Status::out_of_range, "the session holds " + std::to_string(sequence_count()) + " sequences; " +
                                   std::to_string(n) + " more would pass max_sequences (" +
                                   std::to_string(opts_.max_sequences) + ")");
}

}  // namespace infokv
