// The snapshot reader's parts, one file per owner of what they read: the header (read_header.cpp: format, cache
// layout, compression parameters, profile, sampler), a sequence's own state and its compressor's
// (read_sequence.cpp), its KV cache layers (read_layers.cpp); snapshot_load.cpp reads them in order and commits.
// Everything is read and checked into staging structures first, so that a refused snapshot changes nothing.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "snapshot/container.hpp"
#include "snapshot/session_access.hpp"
#include "snapshot/snapshot.hpp"
#include "util/error.hpp"

namespace infokv {
namespace snapshot {
namespace detail {

[[noreturn]] inline void bad(const std::string &m) { fail(Status::bad_snapshot, "corrupt snapshot: " + m); }

struct StagedLayer {
  KvDtype dtype = KvDtype::f16;  // of k and v: the layer's own in the file, else the snapshot's
  std::vector<int32_t> pos;
  std::vector<uint8_t> k, v;  // [n_slots][n_kv_heads][head_dim] of dtype (token-major)
  std::array<std::vector<float>, kSlotChannels> channels;
  std::vector<float> window_q;
};

struct StagedSeq {
  SessionAccess::State st;
  SeqCompression cst;
  int64_t length = 0;
  std::vector<int32_t> window_pos;
  std::vector<StagedLayer> layers;
};

struct Staged {
  KvDtype dtype = KvDtype::f16;
  bool has_sampler = false;
  SamplerParams sp;
  uint64_t rng[4] = {0, 0, 0, 0};
  std::vector<int32_t> history;
  std::vector<StagedSeq> seqs;
};

template <typename T>
void check_hash(const flatbuffers::Vector<T> *v, uint64_t h, const std::string &what) {
  const size_t n = v == nullptr ? 0 : v->size() * sizeof(T);
  const void *p = v == nullptr ? static_cast<const void *>("") : static_cast<const void *>(v->data());
  if (xxh3(p, n) != h) bad("checksum mismatch in " + what);
}

template <typename T>
size_t vsize(const flatbuffers::Vector<T> *v) { return v == nullptr ? 0 : v->size(); }

constexpr int64_t kMaxCounter = int64_t{1} << 53;

inline bool in_range(int64_t v, int64_t lo, int64_t hi) { return v >= lo && v <= hi; }

// Float vectors without Inf or NaN; K/V bytes of a KV dtype without them (a quantised block's scale included).
bool all_finite(const flatbuffers::Vector<float> *v);
bool kv_rows_finite(const flatbuffers::Vector<uint8_t> *v, KvDtype dt);

// What a restore may take from the pool: its free blocks, counted in its own block size.
struct Capacity {
  int64_t free_blocks = 0;
  int32_t block_size = 1;
  const Session *session = nullptr;  // whose max_sequences the header's sequence count must fit
  size_t max_sequences = SIZE_MAX;   // the most sequences the caller can take (see restore())
  int64_t *announced = nullptr;      // receives the header's sequence count (may be null)
};

inline int64_t blocks_for(int64_t kept, int32_t block_size) { return (kept + block_size - 1) / block_size; }

[[noreturn]] void kv_full(int64_t need, int64_t free_blocks);

// The byte geometry of a window query row and of one slot's K/V rows in the header's dtype (a layer of its own dtype
// sizes its rows by it: read_layers.cpp).
struct RowLayout {
  int64_t es, qd, slot_bytes;
  explicit RowLayout(const Summary &sum)
      : es(kv_bytes(kv_window_dtype(sum.kv_dtype), 1)), qd(static_cast<int64_t>(sum.n_heads) * sum.head_dim),
        slot_bytes(2 * sum.n_kv_heads * kv_bytes(sum.kv_dtype, sum.head_dim)) {}
};

// Reads and checks the header chunk; returns the number of sequences it announces. `model` (may be null) is checked
// against it; `staged` (may be null) receives the sampler state.
int32_t read_header(ChunkReader &rd, const Model *model, Staged *staged, Summary &sum);

// Checks a sequence chunk and stages its state (*sq: the staged sequence, null when not staging). `need` adds the
// pool blocks of its kept counts; `cap` (may be null) refuses a sequence that would not fit.
SequenceSummary read_sequence(const fb::Sequence *s, int32_t si, const Summary &sum, Staged *staged, const Capacity *cap,
                              int64_t &need, StagedSeq **sq_out);

// The layer chunks of sequence `si`, checked and (sq not null) staged; max_channels takes the most slot channels a
// chunk has.
void read_layer_chunks(ChunkReader &rd, int32_t si, int32_t layer_chunks, const SequenceSummary &ss, size_t n_wpos,
                       const Summary &sum, const RowLayout &lay, StagedSeq *sq, int &max_channels);

// The dtype a layer saved in `layer` from a snapshot of dtype `snapshot_dtype` is restored in: its own where a
// compression chose it and the cache has the snapshot's dtype and holds that one (a CPU cache), else the cache's.
KvDtype restored_dtype(const KvCache &kv, KvDtype snapshot_dtype, KvDtype layer);
// A staged layer's slots as the cache's: blocks taken from `kv` (appended to `taken` as they are), K/V converted
// from the layer's dtype in the file to restored_dtype() (keys stored less the layer's K bias `bk` on one side only
// get it back or lose it), slot channels and positions moved. Throws kv_full when the pool runs out.
LayerSlots commit_layer(KvCache &kv, StagedLayer &SL, KvDtype snapshot_dtype, const std::vector<float> &bk,
                        std::vector<int32_t> &taken);

}  // namespace detail
}  // namespace snapshot
}  // namespace infokv
