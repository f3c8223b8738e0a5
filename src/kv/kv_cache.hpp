// The paged KV cache: a pool of fixed-size blocks shared by all layers and sequences, a block table per
// sequence and layer (layers keep different token sets after compression), reference-counted sharing for forks
// with copy-on-write, and compaction that returns emptied blocks to the pool.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "kernels/ops.hpp"
#include "kv/kv_store.hpp"

namespace infokv {

struct KvConfig {
  int32_t n_layer = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t n_q_dim = 0;         // n_heads * head_dim, for the observation-window queries
  int32_t block_size = 16;
  KvDtype dtype = KvDtype::f16;
  int64_t n_blocks = 0;        // pool capacity, all layers together
  // Whether a layer may hold a dtype other than `dtype` (the backend's kernels read every dtype: the CPU's).
  bool layer_dtypes = false;
};

// Slot channels: what the compressor records about each cached token (compress/channels.hpp names them), kept
// alongside its K/V and moved with it by compaction and copy-on-write. The cache never reads them.
constexpr int kSlotChannels = 4;

struct LayerSlots {
  // The precision this layer's K/V are held in: the cache's dtype unless a compression chose another for it (DESIGN
  // §9 "How precisely"). Blocks have the same bytes whatever their dtype, so a layer of a smaller dtype holds more
  // slots per block (KvCache::slots_per_block).
  KvDtype dtype = KvDtype::f16;
  std::vector<int32_t> blocks;  // block table
  std::vector<int32_t> pos;     // original position of each kept slot, ascending
  std::array<std::vector<float>, kSlotChannels> channels;
  int32_t n() const { return static_cast<int32_t>(pos.size()); }
};

// One layer's observation-window rows, shared copy-on-write between a sequence and its forks: a fork copies a
// pointer, and the rows are copied only when one of the sharers changes them (its next decode appends rows). A fork
// of a SmolLM2-135M sequence with a policy thus costs ~0.1 MiB of host memory instead of ~2.4 MiB until it decodes.
// Sharers live in one session, which one thread uses at a time.
class CowRows {
 public:
  const std::vector<float> &get() const { return p_ != nullptr ? *p_ : empty(); }
  // The rows to change: this sequence's own copy (made now when they are shared).
  std::vector<float> &mut() {
    if (p_ == nullptr) p_ = std::make_shared<std::vector<float>>();
    else if (p_.use_count() > 1) p_ = std::make_shared<std::vector<float>>(*p_);
    return *p_;
  }
  void assign(std::vector<float> rows) { p_ = std::make_shared<std::vector<float>>(std::move(rows)); }
  size_t size() const { return get().size(); }
  // Equal rows (shared or not).
  friend bool operator==(const CowRows &a, const CowRows &b) { return a.get() == b.get(); }
  friend bool operator!=(const CowRows &a, const CowRows &b) { return !(a == b); }
  // How many sequences share these rows (1 when unshared or empty).
  int64_t owners() const { return p_ != nullptr ? static_cast<int64_t>(p_.use_count()) : 1; }
  // Heap bytes of the rows, divided among their sharers (so that a sum over sequences counts them once).
  int64_t bytes_share() const {
    return p_ != nullptr ? static_cast<int64_t>(p_->capacity() * sizeof(float)) / owners() : 0;
  }

 private:
  static const std::vector<float> &empty() {
    static const std::vector<float> e;
    return e;
  }
  std::shared_ptr<std::vector<float>> p_;
};

struct SeqCache {
  int64_t length = 0;                 // logical length: positions ever appended (minus truncation)
  std::vector<LayerSlots> layers;
  // The last few queries of each layer (post-RoPE) with their positions: the observation window that scores
  // the cached tokens at compression time. [layer] -> rows of n_q_dim floats, oldest first.
  std::vector<CowRows> window_q;
  std::vector<int32_t> window_pos;    // positions of the rows of window_q (same for every layer)
};

// What the backend observed during one step of a sequence, in neutral terms, for compression: held back until the
// step commits, so that a failed step leaves the cache and the compressor's state exactly as they were (DESIGN §2)
// without copying them beforehand. The cache applies the observation window's rows (commit_step); the compressor
// records the rest in the slot channels (Compressor::observe).
struct StepObservations {
  // [layer][slot]: the attention each slot received from the step's queries, and from how many (sized to the slots
  // the step has seen; empty when not asked for).
  std::vector<std::vector<float>> attn_sum, attn_count;
  std::vector<std::vector<float>> window_q;    // [layer]: query rows appended, oldest first (n_q_dim floats each)
  std::vector<int32_t> window_pos;             // positions of those rows
  // The step's new tokens, in order (empty when not asked for): the entropy of the distribution that predicted each
  // ([token]) and its representation change 1 - cos(h_l, h_L) ([layer][token]).
  std::vector<float> entropy;
  std::vector<std::vector<float>> rep_change;
};

// Drops the front of v so that at most `keep` elements remain (the observation window slides).
template <typename T>
void keep_last(std::vector<T> &v, size_t keep) {
  if (v.size() > keep) v.erase(v.begin(), v.end() - static_cast<std::ptrdiff_t>(keep));
}

struct KvStats {
  int64_t blocks_total = 0;
  int64_t blocks_used = 0;
  int64_t blocks_free = 0;
  int64_t block_bytes = 0;
  int64_t bytes_used = 0;
  // Host memory outside the pool (malloc'd, so invisible in the block counts): the pool's per-block bookkeeping and
  // every sequence's block tables, positions, slot channels and observation window (the window alone is
  // [layers x window rows x n_q_dim] floats, shared by forks until one changes it, counted once).
  // Session::kv_stats() adds the sessions' per-sequence state (token history, logits).
  int64_t host_bytes = 0;
};

class KvCache {
 public:
  // Makes the pool of a KvCache: a store for this block geometry (pool and block table null) and block count.
  using StoreFactory = std::function<std::unique_ptr<KvStore>(const PagedKv &geometry, int64_t n_blocks)>;
  // The block pool is made by `make_store` once the config is checked (empty: a host store). Throws
  // Error(invalid_argument) for a bad config and Error(out_of_memory) when the pool cannot be reserved.
  explicit KvCache(const KvConfig &cfg, const StoreFactory &make_store = {});
  // Throws invalid_argument for a value that is no KvDtype and unsupported for a quantised dtype whose blocks do not
  // tile a head of head_dim values (the constructor checks it; a session checks it before sizing its pool).
  static void check_dtype(KvDtype dtype, int32_t head_dim);
  ~KvCache();
  KvCache(const KvCache &) = delete;
  KvCache &operator=(const KvCache &) = delete;

  const KvConfig &config() const { return cfg_; }
  int64_t block_bytes() const { return block_bytes_; }
  // Token slots one block holds for a layer of dtype d: config().block_size for the cache's own dtype, else as many
  // as fit in the same bytes (a block of 16 f16 slots of head size 64 holds 30 q8_0 or 56 q4_0 slots); 0 when not
  // one fits (a larger dtype in a block of one slot), d cannot store this head size or the cache holds one dtype
  // (KvConfig::layer_dtypes).
  int32_t slots_per_block(KvDtype d) const;
  // slots_per_block() of layer `layer` of sequence `id`.
  int32_t layer_block_size(int32_t id, int32_t layer) const;
  KvStats stats() const;
  // Host bytes of one sequence's cache state (see KvStats::host_bytes), by vector capacity.
  int64_t seq_host_bytes(int32_t seq) const;
  // What the sequence would hold on its own if every window it shares with forks were copied (its worst case).
  int64_t seq_host_bytes_unshared(int32_t seq) const;

  bool has(int32_t seq) const { return seqs_.count(seq) != 0; }
  std::vector<int32_t> sequence_ids() const;
  const SeqCache &seq(int32_t id) const;
  SeqCache &seq_mut(int32_t id);

  void add(int32_t id);                       // throws invalid_argument if it exists
  void remove(int32_t id);                    // returns its blocks; throws not_found
  void fork(int32_t src, int32_t dst);        // dst shares src's blocks
  void rename(int32_t from, int32_t to);      // sequence `from` becomes `to` (which must not exist)
  void truncate(int32_t id, int64_t length);  // drops positions >= length
  void remove_range(int32_t id, int64_t p0, int64_t p1);  // drops positions in [p0, p1)

  // Blocks an append of counts[i] tokens to sequences ids[i] would take from the pool (copy-on-write included).
  int64_t blocks_needed(const std::vector<int32_t> &ids, const std::vector<int32_t> &counts) const;
  // blocks_needed() for appending `count` tokens to a fork of `id` (which shares every block of it, so a partly
  // filled last block is copied before it is written), before the fork exists.
  int64_t blocks_needed_fork(int32_t id, int32_t count) const;
  // Makes room for `n` more slots in every layer of `id` (positions given), copying a shared last block first.
  // Call only after blocks_needed() fit; throws kv_full otherwise, changing nothing for that sequence.
  void append_slots(int32_t id, const int32_t *positions, int32_t n);
  // Applies a step's observation-window rows to `id`, keeping the last `window_cap` of them.
  void commit_step(int32_t id, const StepObservations &step, int32_t window_cap);
  // What commit_step will need, allocated beforehand (a window shared with a fork is copied, room reserved), so that
  // the commit itself allocates nothing and cannot fail half-way. May throw (out of memory); changes no content.
  void prepare_step(int32_t id, const StepObservations &step, int32_t window_cap);
  // Undoes append_slots back to n_keep slots per layer (used when a step fails after reserving).
  void shrink_to(int32_t id, const std::vector<int32_t> &n_keep, int64_t length);

  // Free blocks that compact(id, keep) would return to the pool, less the fresh ones its copy-on-write takes
  // (negative when it takes more), under the current reference counts. Changes nothing; keep as for compact().
  // `dtypes` (optional, one per layer): the dtype each layer is then converted to (convert_layer), counted too.
  int64_t blocks_freed_by(int32_t id, const std::vector<std::vector<int32_t>> &keep,
                          const std::vector<KvDtype> *dtypes = nullptr) const;
  // blocks_needed() for appending `count` tokens to `id` after compact(id, keep) (and the conversions to `dtypes`).
  int64_t blocks_needed_after(int32_t id, const std::vector<std::vector<int32_t>> &keep, int32_t count,
                              const std::vector<KvDtype> *dtypes = nullptr) const;

  // Keeps, per layer, only the given slot indices (ascending) and returns emptied blocks to the pool.
  // All or nothing: throws kv_full (changing nothing) if copy-on-write of shared blocks needs more free blocks.
  void compact(int32_t id, const std::vector<std::vector<int32_t>> &keep);

  // Takes `n` blocks from the pool (reference count 1 each), all or nothing (throws kv_full).
  std::vector<int32_t> alloc_blocks(int64_t n);
  // Gives back blocks from alloc_blocks() that no sequence adopted (a restore that failed half-way).
  void release_blocks(const std::vector<int32_t> &blocks);
  // Adds sequence `id` whose block tables hold blocks from alloc_blocks() (their references pass to it).
  // Throws invalid_argument if `id` exists or the tables do not fit the slots (the blocks are then released).
  void adopt(int32_t id, SeqCache &&s);

  // A layer's K/V as rows, for what saves and restores them (snapshots). layer_blocks(): the blocks of `layer` of
  // `id` read from the store in table order (one read, host or device). gather_rows(): from those, K (which 0) or V
  // (1) of slots [first, first + n), head-major: [n_kv_heads][n][row bytes] in the cache's dtype.
  std::vector<uint8_t> layer_blocks(int32_t id, int32_t layer) const;
  // A layer of `id` copied to host memory and a view of it (its blocks in table order, whatever the store), for
  // what reads K/V on the host: the view points into this object, which must outlive its use.
  struct HostLayer {
    std::vector<uint8_t> blocks;
    std::vector<int32_t> table;
    PagedKv view{};
  };
  void host_layer(int32_t id, int32_t layer, HostLayer &out) const;
  // `blocks` are a layer's of dtype `dtype` (LayerSlots::dtype).
  void gather_rows(const std::vector<uint8_t> &blocks, KvDtype dtype, int which, int32_t first, int32_t n,
                   std::vector<uint8_t> &out) const;
  // The other way: n slots of token-major K and V rows ([n][n_kv_heads][head_dim] of dtype `src`) written into fresh
  // blocks of dtype `dst` (which slots_per_block() must hold). Keys that one side stores less the layer's K bias (kv_keys_less_bias) and the other
  // not get `key_bias` added back or taken away. Returns the blocks, also appended to `taken` as they are taken (a
  // caller that fails later gives them back with release_blocks). Throws kv_full when the pool has too few.
  std::vector<int32_t> import_rows(const uint8_t *k, const uint8_t *v, int64_t n, KvDtype src, KvDtype dst,
                                   const std::vector<float> &key_bias, std::vector<int32_t> &taken);
  // Re-stores layer `layer` of `id` in dtype `dtype` (rounding its K/V to it; keys less or plus `key_bias`, the layer's
  // K bias, as kv_keys_less_bias says): fresh blocks are written first, then the old ones released. All or nothing:
  // throws kv_full (changing nothing) when the pool lacks the new blocks, unsupported when slots_per_block(dtype) is
  // 0. A no-op for the layer's own dtype.
  void convert_layer(int32_t id, int32_t layer, KvDtype dtype, const std::vector<float> &key_bias);
  // Blocks that hold n slots of a layer of dtype d (what convert_layer takes for a layer of n slots before it returns
  // the old ones); 0 where slots_per_block(d) is 0.
  int64_t blocks_holding(KvDtype d, int64_t n) const;

  PagedKv view(int32_t id, int32_t layer);
  KvStore &store() { return *store_; }
  const KvStore &store() const { return *store_; }
  int32_t refcount(int32_t block) const { return refcount_[static_cast<size_t>(block)]; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }

  // Checks every invariant (reference counts equal table references, free list exact, slots fit blocks,
  // positions ascending). Throws Error(internal) describing the first violation. For tests.
  void check_invariants() const;

 private:
  int32_t alloc_block();
  void retain(int32_t b) { ++refcount_[static_cast<size_t>(b)]; }
  void release(int32_t b);
  void release_all(SeqCache &s);
  // Adds `s` as sequence `id`; if that allocation fails, its blocks go back to the pool before the error leaves.
  void insert_or_release(int32_t id, SeqCache &&s);
  // Hands the blocks freed since the last call to the store, which may give their memory back to the OS.
  void return_memory();

  KvConfig cfg_;
  int64_t block_bytes_ = 0;
  std::unique_ptr<KvStore> store_;
  PagedKv geometry_{};  // the pool's base and block geometry; view() adds a table and slot count
  // The geometry of a layer of dtype d: geometry_ with that dtype and its slots per block.
  PagedKv geometry_of(KvDtype d) const;
  std::vector<int32_t> refcount_;
  std::vector<int32_t> free_;
  std::vector<int32_t> freed_;  // freed since the last return_memory()
  std::map<int32_t, SeqCache> seqs_;
};

}  // namespace infokv
