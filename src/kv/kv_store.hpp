// Where the KV block pool's bytes live, and the few ways KvCache moves them: copy-on-write of a block, the slot
// moves of compaction, and whole-block reads and writes for snapshots. The host store (memory-mapped, lazily
// committed) serves the CPU; a device backend supplies its own (src/backend/ops_forward.cpp), so that KvCache keeps
// all the bookkeeping (block tables, positions, reference counts) on the host whatever the device.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/ops.hpp"

namespace infokv {

class KvStore {
 public:
  virtual ~KvStore() = default;
  // The pool's base address as the device's kernels see it (PagedKv::pool): host memory for the CPU store.
  virtual uint8_t *base() const = 0;
  virtual void copy_block(int32_t dst, int32_t src) = 0;
  // Compaction moves, cpu::kv_move_slots semantics: moves[n][4] = (src block, src slot, dst block, dst slot) on the
  // host. They come in compaction order: no move writes a location that a later move reads (kept slots gather
  // towards the front of their layer, or into fresh copies), so a store may apply them in order, in batches that
  // each read before they write, with scratch memory bounded by a batch rather than by the whole compaction.
  // `layer` is the moved layers' geometry (their dtype and slots per block; its pool and table are ignored).
  virtual void move_slots(const std::vector<int32_t> &moves, const PagedKv &layer) = 0;

  // Moves per batch: bounds the scratch memory of a compaction (all layers of a 3,600-token SmolLM2 sequence moved
  // at once needed 85 MB of scratch, kept for the life of the session).
  static constexpr int64_t kMoveBatch = 4096;
  // Whole blocks to or from host memory, in the order of ids: out/in hold ids.size() * block_bytes bytes.
  virtual void read_blocks(const std::vector<int32_t> &ids, uint8_t *out) const = 0;
  virtual void write_blocks(const std::vector<int32_t> &ids, const uint8_t *in) = 0;
  // Blocks that went back to the pool: their contents are dead, and a store may return their memory to the
  // operating system (the next writer finds them zeroed or as they were). ids ascending. Default: keep it.
  virtual void discard_blocks(const std::vector<int32_t> &ids) { (void)ids; }
};

// A pool of n_blocks blocks with `geometry` (pool and block table ignored) in anonymous, lazily committed host
// memory: a large pool costs address space, not RAM, until blocks are written. Throws Error(out_of_memory).
std::unique_ptr<KvStore> make_host_kv_store(const PagedKv &geometry, int64_t n_blocks);

}  // namespace infokv
