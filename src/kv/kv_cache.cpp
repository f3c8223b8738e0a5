#include "kv/kv_cache.hpp"

#include <algorithm>
#include <array>
#include <new>
#include <string>

#include "util/error.hpp"
#include "kernels/fp16.hpp"
#include "util/limits.hpp"

namespace infokv {

namespace {
void round_to_dtype(float *x, size_t n, KvDtype dt) {
  if (dt == KvDtype::f16)
    for (size_t i = 0; i < n; ++i) x[i] = fp16_to_float(float_to_fp16(x[i]));
  else if (dt == KvDtype::bf16)
    for (size_t i = 0; i < n; ++i) x[i] = bf16_to_float(float_to_bf16(x[i]));
}

int32_t blocks_for(int64_t slots, int32_t bs) { return static_cast<int32_t>((slots + bs - 1) / bs); }

// Whether destination block b of a compaction to `keep` receives any slot other than its own (then a shared block
// must be copied before it is written).
bool block_changes(const std::vector<int32_t> &keep, int32_t b, int32_t bs) {
  const int32_t end = std::min<int32_t>(static_cast<int32_t>(keep.size()), (b + 1) * bs);
  for (int32_t j = b * bs; j < end; ++j)
    if (keep[static_cast<size_t>(j)] != j) return true;
  return false;
}
}  // namespace

KvCache::KvCache(const KvConfig &cfg, const StoreFactory &make_store) : cfg_(cfg) {
  if (cfg.block_size < 1 || cfg.block_size > limits::max_block_size)
    fail(Status::invalid_argument, "block size must be in [1, " + std::to_string(limits::max_block_size) + "]");
  // 2^26 blocks of 16 tokens is a billion tokens per layer-pool: more is a mistake, and the per-block bookkeeping
  // (8 bytes a block) would itself be gigabytes.
  if (cfg.n_blocks < 1 || cfg.n_blocks > (int64_t{1} << 26))
    fail(Status::invalid_argument, "KV pool must hold between 1 and 2^26 blocks (got " + std::to_string(cfg.n_blocks) + ")");
  check_dtype(cfg.dtype, cfg.head_dim);
  block_bytes_ = int64_t{2} * cfg.n_kv_heads * cfg.block_size * kv_bytes(cfg.dtype, cfg.head_dim);
  geometry_ = PagedKv{};
  geometry_.block_stride = block_bytes_;
  geometry_.block_size = cfg.block_size;
  geometry_.n_kv_heads = cfg.n_kv_heads;
  geometry_.head_dim = cfg.head_dim;
  geometry_.dtype = cfg.dtype;
  store_ = make_store ? make_store(geometry_, cfg.n_blocks) : make_host_kv_store(geometry_, cfg.n_blocks);
  geometry_.pool = store_->base();
  refcount_.assign(static_cast<size_t>(cfg.n_blocks), 0);
  free_.reserve(static_cast<size_t>(cfg.n_blocks));
  // Hand out low block numbers first (pop from the back).
  for (int64_t b = cfg.n_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

KvCache::~KvCache() = default;

int32_t KvCache::slots_per_block(KvDtype d) const {
  if (d == cfg_.dtype) return cfg_.block_size;
  if (!cfg_.layer_dtypes || !kv_dtype_valid(static_cast<int32_t>(d)) || !kv_dtype_fits(d, cfg_.head_dim)) return 0;
  return static_cast<int32_t>(block_bytes_ / (int64_t{2} * cfg_.n_kv_heads * kv_bytes(d, cfg_.head_dim)));
}

int32_t KvCache::layer_block_size(int32_t id, int32_t layer) const {
  return slots_per_block(seq(id).layers.at(static_cast<size_t>(layer)).dtype);
}

PagedKv KvCache::geometry_of(KvDtype d) const {
  PagedKv g = geometry_;
  g.dtype = d;
  g.block_size = slots_per_block(d);
  return g;
}

void KvCache::check_dtype(KvDtype dtype, int32_t head_dim) {
  if (!kv_dtype_valid(static_cast<int32_t>(dtype)))
    fail(Status::invalid_argument, "kv_dtype " + std::to_string(static_cast<int32_t>(dtype)) + " is not a KV dtype");
  if (!kv_dtype_fits(dtype, head_dim))
    fail(Status::unsupported, std::string("KV dtype ") + kv_dtype_name(dtype) + " stores blocks of " +
                                  std::to_string(kKvQuantBlock) + " values; this model's head size " +
                                  std::to_string(head_dim) + " is not a multiple of it (use f16)");
}

KvStats KvCache::stats() const {
  KvStats s;
  s.blocks_total = cfg_.n_blocks;
  s.blocks_free = static_cast<int64_t>(free_.size());
  s.blocks_used = s.blocks_total - s.blocks_free;
  s.block_bytes = block_bytes_;
  s.bytes_used = s.blocks_used * block_bytes_;
  s.host_bytes = static_cast<int64_t>((refcount_.capacity() + free_.capacity()) * sizeof(int32_t));
  for (const auto &kv : seqs_) s.host_bytes += seq_host_bytes(kv.first);
  return s;
}

namespace {
// Heap bytes of a vector's buffer (the vector object itself is counted with its owner).
template <typename T>
int64_t heap_bytes(const std::vector<T> &v) {
  return static_cast<int64_t>(v.capacity() * sizeof(T));
}
}  // namespace

int64_t KvCache::seq_host_bytes(int32_t id) const {
  const SeqCache &c = seq(id);
  // A std::map node: the key/value pair plus about four pointers of tree links.
  int64_t n = static_cast<int64_t>(sizeof(std::pair<const int32_t, SeqCache>) + 4 * sizeof(void *));
  n += heap_bytes(c.layers) + heap_bytes(c.window_q) + heap_bytes(c.window_pos);
  for (const LayerSlots &L : c.layers) {
    n += heap_bytes(L.blocks) + heap_bytes(L.pos);
    for (const auto &ch : L.channels) n += heap_bytes(ch);
  }
  for (const CowRows &w : c.window_q) n += w.bytes_share();
  return n;
}

int64_t KvCache::seq_host_bytes_unshared(int32_t id) const {
  int64_t n = seq_host_bytes(id);
  for (const CowRows &w : seq(id).window_q) n += static_cast<int64_t>(w.get().capacity() * sizeof(float)) - w.bytes_share();
  return n;
}

std::vector<int32_t> KvCache::sequence_ids() const {
  std::vector<int32_t> ids;
  for (const auto &kv : seqs_) ids.push_back(kv.first);
  return ids;
}

const SeqCache &KvCache::seq(int32_t id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) fail(Status::not_found, "no sequence " + std::to_string(id));
  return it->second;
}

SeqCache &KvCache::seq_mut(int32_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) fail(Status::not_found, "no sequence " + std::to_string(id));
  return it->second;
}

void KvCache::insert_or_release(int32_t id, SeqCache &&s) {
  try {
    seqs_.emplace(id, std::move(s));  // the node is allocated before s is moved from
  } catch (...) {
    release_all(s);
    return_memory();
    throw;
  }
}

void KvCache::add(int32_t id) {
  if (seqs_.count(id) != 0) fail(Status::invalid_argument, "sequence " + std::to_string(id) + " already exists");
  SeqCache s;
  s.layers.resize(static_cast<size_t>(cfg_.n_layer));
  for (LayerSlots &L : s.layers) L.dtype = cfg_.dtype;
  s.window_q.resize(static_cast<size_t>(cfg_.n_layer));
  insert_or_release(id, std::move(s));
}

void KvCache::release_all(SeqCache &s) {
  for (LayerSlots &L : s.layers)
    for (int32_t b : L.blocks) release(b);
}

void KvCache::remove(int32_t id) {
  SeqCache &s = seq_mut(id);
  release_all(s);
  seqs_.erase(id);
  return_memory();
}

void KvCache::fork(int32_t src, int32_t dst) {
  const SeqCache &s = seq(src);
  if (seqs_.count(dst) != 0) fail(Status::invalid_argument, "sequence " + std::to_string(dst) + " already exists");
  // The references are taken once the copy is in place: a copy or an insertion that throws leaves every count
  // as it was.
  const SeqCache &added = seqs_.emplace(dst, s).first->second;
  for (const LayerSlots &L : added.layers)
    for (int32_t b : L.blocks) retain(b);
}

void KvCache::rename(int32_t from, int32_t to) {
  seq(from);
  if (seqs_.count(to) != 0) fail(Status::invalid_argument, "sequence " + std::to_string(to) + " already exists");
  auto node = seqs_.extract(from);
  node.key() = to;
  seqs_.insert(std::move(node));
}

int32_t KvCache::alloc_block() {
  if (free_.empty()) fail(Status::kv_full, "KV cache full: no free block in the pool");
  int32_t b = free_.back();
  free_.pop_back();
  refcount_[static_cast<size_t>(b)] = 1;
  return b;
}

void KvCache::release(int32_t b) {
  int32_t &rc = refcount_[static_cast<size_t>(b)];
  if (--rc == 0) {
    free_.push_back(b);  // reserved for the whole pool: never allocates
    // Only for return_memory(), which gives pages back to the OS: an optimisation, so out of memory just skips
    // it and release() never throws (rollbacks and compaction commits rely on that).
    try {
      freed_.push_back(b);
    } catch (const std::bad_alloc &) {
    }
  }
}

void KvCache::return_memory() {
  std::sort(freed_.begin(), freed_.end());
  freed_.erase(std::unique(freed_.begin(), freed_.end()), freed_.end());
  freed_.erase(std::remove_if(freed_.begin(), freed_.end(), [this](int32_t b) { return refcount_[static_cast<size_t>(b)] != 0; }),
               freed_.end());
  if (!freed_.empty()) store_->discard_blocks(freed_);
  freed_.clear();
}

int64_t KvCache::blocks_needed(const std::vector<int32_t> &ids, const std::vector<int32_t> &counts) const {
  // Counts per sequence are summed first: one sequence may appear several times in a batch.
  std::map<int32_t, int64_t> per_seq;
  for (size_t i = 0; i < ids.size(); ++i) per_seq[ids[i]] += counts[i];
  int64_t need = 0;
  for (const auto &kv : per_seq) {
    const SeqCache &s = seq(kv.first);
    for (const LayerSlots &L : s.layers) {
      const int32_t bs = slots_per_block(L.dtype);
      const int64_t n0 = L.n();
      need += blocks_for(n0 + kv.second, bs) - blocks_for(n0, bs);
      if (n0 % bs != 0 && kv.second > 0 && refcount_[static_cast<size_t>(L.blocks.back())] > 1) ++need;  // copy-on-write
    }
  }
  return need;
}

int64_t KvCache::blocks_needed_fork(int32_t id, int32_t count) const {
  if (count <= 0) return 0;
  int64_t need = 0;
  for (const LayerSlots &L : seq(id).layers) {
    const int32_t bs = slots_per_block(L.dtype);
    const int64_t n0 = L.n();
    need += blocks_for(n0 + count, bs) - blocks_for(n0, bs) + (n0 % bs != 0 ? 1 : 0);  // copy-on-write
  }
  return need;
}

void KvCache::append_slots(int32_t id, const int32_t *positions, int32_t n) {
  SeqCache &s = seq_mut(id);
  if (n <= 0) return;
  std::vector<int32_t> keep_n;
  for (const LayerSlots &L : s.layers) keep_n.push_back(L.n());
  const int64_t old_len = s.length;
  try {
    for (LayerSlots &L : s.layers) {
      const int32_t bs = slots_per_block(L.dtype);
      const int32_t n0 = L.n();
      if (n0 % bs != 0 && refcount_[static_cast<size_t>(L.blocks.back())] > 1) {
        int32_t nb = alloc_block();
        store_->copy_block(nb, L.blocks.back());
        release(L.blocks.back());
        L.blocks.back() = nb;
      }
      L.blocks.reserve(static_cast<size_t>(blocks_for(static_cast<int64_t>(n0) + n, bs)));  // push_back below can't throw
      while (static_cast<int64_t>(L.blocks.size()) * bs < n0 + n) L.blocks.push_back(alloc_block());
      L.pos.insert(L.pos.end(), positions, positions + n);
      for (auto &ch : L.channels) ch.resize(L.pos.size(), 0.0f);
    }
  } catch (...) {
    shrink_to(id, keep_n, old_len);
    throw;
  }
  s.length = std::max<int64_t>(s.length, static_cast<int64_t>(positions[n - 1]) + 1);
}

namespace {
// Rows of a window after a step: the newest `cap` of old + new (the oldest dropped first).
size_t rows_kept_before(size_t have, size_t add, size_t cap) { return std::min(have, add >= cap ? 0 : cap - add); }
}  // namespace

void KvCache::prepare_step(int32_t id, const StepObservations &step, int32_t window_cap) {
  SeqCache &s = seq_mut(id);
  const size_t cap = static_cast<size_t>(window_cap) * static_cast<size_t>(cfg_.n_q_dim);
  for (size_t l = 0; l < s.layers.size() && l < step.window_q.size(); ++l) {
    std::vector<float> &wq = s.window_q[l].mut();  // a window shared with a fork is copied here, not in the commit
    wq.reserve(rows_kept_before(wq.size(), step.window_q[l].size(), cap) + step.window_q[l].size());
  }
  const auto pcap = static_cast<size_t>(window_cap);
  s.window_pos.reserve(rows_kept_before(s.window_pos.size(), step.window_pos.size(), pcap) + step.window_pos.size());
}

void KvCache::commit_step(int32_t id, const StepObservations &step, int32_t window_cap) {
  SeqCache &s = seq_mut(id);
  for (size_t l = 0; l < s.layers.size(); ++l) {
    if (l < step.window_q.size()) {
      // prepare_step made the rows this sequence's own and reserved room for them, so nothing here allocates. The
      // oldest rows go first and the buffer holds exactly what it keeps (at most window_cap rows): inserting first
      // would let the vector double its capacity, twice the window's memory for good.
      std::vector<float> &wq = s.window_q[l].mut();
      const size_t cap = static_cast<size_t>(window_cap) * static_cast<size_t>(cfg_.n_q_dim);
      const size_t add = step.window_q[l].size();
      keep_last(wq, rows_kept_before(wq.size(), add, cap));
      const size_t at = wq.size();
      wq.insert(wq.end(), step.window_q[l].begin(), step.window_q[l].end());
      // Held at the KV dtype's precision (f16 beside a quantised cache), like the keys they are scored against: a
      // snapshot then stores them in that dtype (half the bytes of f32) and a restored sequence scores exactly as
      // the original would.
      round_to_dtype(wq.data() + at, wq.size() - at, kv_window_dtype(cfg_.dtype));
      keep_last(wq, cap);
    }
  }
  keep_last(s.window_pos, rows_kept_before(s.window_pos.size(), step.window_pos.size(), static_cast<size_t>(window_cap)));
  s.window_pos.insert(s.window_pos.end(), step.window_pos.begin(), step.window_pos.end());
  keep_last(s.window_pos, static_cast<size_t>(window_cap));
}

void KvCache::shrink_to(int32_t id, const std::vector<int32_t> &n_keep, int64_t length) {
  SeqCache &s = seq_mut(id);
  for (size_t l = 0; l < s.layers.size(); ++l) {
    LayerSlots &L = s.layers[l];
    const int32_t bs = slots_per_block(L.dtype);
    const int32_t n = std::min(L.n(), n_keep[l]);
    const auto nb = static_cast<size_t>(blocks_for(n, bs));
    while (L.blocks.size() > nb) {
      release(L.blocks.back());
      L.blocks.pop_back();
    }
    L.pos.resize(static_cast<size_t>(n));
    for (auto &ch : L.channels) ch.resize(static_cast<size_t>(n));
  }
  s.length = length;
  return_memory();
}

void KvCache::truncate(int32_t id, int64_t length) {
  SeqCache &s = seq_mut(id);
  if (length < 0 || length > s.length)
    fail(Status::out_of_range, "cannot truncate sequence " + std::to_string(id) + " of length " + std::to_string(s.length) +
                                   " to " + std::to_string(length));
  // Positions ascend, so truncation drops a tail of every layer: no data moves.
  std::vector<int32_t> keep;
  for (const LayerSlots &L : s.layers)
    keep.push_back(static_cast<int32_t>(std::lower_bound(L.pos.begin(), L.pos.end(), length) - L.pos.begin()));
  shrink_to(id, keep, length);
  size_t w = 0;
  while (w < s.window_pos.size() && s.window_pos[w] < length) ++w;
  const auto qd = static_cast<size_t>(cfg_.n_q_dim);
  s.window_pos.resize(w);
  for (CowRows &wq : s.window_q)
    if (wq.size() > w * qd) wq.mut().resize(w * qd);
}

void KvCache::remove_range(int32_t id, int64_t p0, int64_t p1) {
  const SeqCache &s = seq(id);
  if (p0 < 0 || p1 < p0) fail(Status::out_of_range, "invalid position range");
  std::vector<std::vector<int32_t>> keep(s.layers.size());
  for (size_t l = 0; l < s.layers.size(); ++l) {
    const LayerSlots &L = s.layers[l];
    for (int32_t j = 0; j < L.n(); ++j)
      if (L.pos[static_cast<size_t>(j)] < p0 || L.pos[static_cast<size_t>(j)] >= p1) keep[l].push_back(j);
  }
  compact(id, keep);
}

namespace {
// The dtype layer l is held in after a compaction with conversions `dtypes` (null or empty: none).
KvDtype dtype_after(const LayerSlots &L, const std::vector<KvDtype> *dtypes, size_t l) {
  return dtypes != nullptr && l < dtypes->size() ? (*dtypes)[l] : L.dtype;
}
}  // namespace

int64_t KvCache::blocks_freed_by(int32_t id, const std::vector<std::vector<int32_t>> &keep, const std::vector<KvDtype> *dtypes) const {
  const SeqCache &s = seq(id);
  if (keep.size() != s.layers.size()) fail(Status::invalid_argument, "compaction plan: one keep list per layer expected");
  int64_t freed = 0;
  for (size_t l = 0; l < keep.size(); ++l) {
    const std::vector<int32_t> &blocks = s.layers[l].blocks;
    const KvDtype to = dtype_after(s.layers[l], dtypes, l);
    if (to != s.layers[l].dtype) {  // converted: every block it holds goes back (its shared ones lose a reference)
      for (int32_t b : blocks) freed += refcount_[static_cast<size_t>(b)] > 1 ? 0 : 1;
      const int32_t nbs = slots_per_block(to);
      freed -= nbs > 0 ? blocks_for(static_cast<int64_t>(keep[l].size()), nbs) : 0;
      continue;
    }
    const int32_t bs = slots_per_block(s.layers[l].dtype);
    const int32_t nb = blocks_for(static_cast<int64_t>(keep[l].size()), bs);
    for (size_t b = 0; b < blocks.size(); ++b) {
      const bool shared = refcount_[static_cast<size_t>(blocks[b])] > 1;
      if (b >= static_cast<size_t>(nb)) freed += shared ? 0 : 1;                               // released
      else if (shared && block_changes(keep[l], static_cast<int32_t>(b), bs)) freed -= 1;  // copied first
    }
  }
  return freed;
}

int64_t KvCache::blocks_needed_after(int32_t id, const std::vector<std::vector<int32_t>> &keep, int32_t count,
                                     const std::vector<KvDtype> *dtypes) const {
  const SeqCache &s = seq(id);
  if (keep.size() != s.layers.size()) fail(Status::invalid_argument, "compaction plan: one keep list per layer expected");
  if (count <= 0) return 0;
  int64_t need = 0;
  for (size_t l = 0; l < keep.size(); ++l) {
    const KvDtype to = dtype_after(s.layers[l], dtypes, l);
    const int64_t n0 = static_cast<int64_t>(keep[l].size());
    if (to != s.layers[l].dtype) {  // fresh, unshared blocks
      const int32_t nbs = std::max(1, slots_per_block(to));
      need += blocks_for(n0 + count, nbs) - blocks_for(n0, nbs);
      continue;
    }
    const int32_t bs = slots_per_block(s.layers[l].dtype);
    const int32_t nb = blocks_for(n0, bs);
    need += blocks_for(n0 + count, bs) - nb;
    // The last kept block stays shared only if compaction leaves it as it is (a changed shared block is copied).
    if (n0 % bs != 0) {
      const int32_t last = s.layers[l].blocks[static_cast<size_t>(nb - 1)];
      if (refcount_[static_cast<size_t>(last)] > 1 && !block_changes(keep[l], nb - 1, bs)) ++need;  // copy-on-write
    }
  }
  return need;
}

void KvCache::compact(int32_t id, const std::vector<std::vector<int32_t>> &keep) {
  SeqCache &s = seq_mut(id);
  if (keep.size() != s.layers.size()) fail(Status::invalid_argument, "compact: one keep list per layer expected");
  // Validate and count the fresh blocks copy-on-write needs, before touching anything.
  int64_t need = 0;
  for (size_t l = 0; l < keep.size(); ++l) {
    const LayerSlots &L = s.layers[l];
    const int32_t bs = slots_per_block(L.dtype);
    const auto &k = keep[l];
    for (size_t i = 0; i < k.size(); ++i)
      if (k[i] < 0 || k[i] >= L.n() || (i > 0 && k[i] <= k[i - 1]))
        fail(Status::invalid_argument, "compact: keep list of layer " + std::to_string(l) + " is not ascending slot indices");
    const int32_t nb = blocks_for(static_cast<int64_t>(k.size()), bs);
    for (int32_t b = 0; b < nb; ++b)
      if (block_changes(k, b, bs) && refcount_[static_cast<size_t>(L.blocks[static_cast<size_t>(b)])] > 1) ++need;
  }
  if (need > free_blocks())
    fail(Status::kv_full, "KV cache full: compaction of shared blocks needs " + std::to_string(need) + " free blocks");

  // Everything that allocates happens before the first change (new block tables, positions, slot channels,
  // the move list, the store's scratch), so that out of host memory leaves the sequence as it was; fresh blocks
  // taken for copy-on-write go back on failure. Then the commit only releases blocks and moves vectors.
  std::vector<std::vector<int32_t>> new_tables(keep.size());
  std::vector<std::vector<int32_t>> new_pos(keep.size());
  std::vector<std::vector<std::vector<float>>> new_channels(keep.size());
  // The moves of each layer dtype (index: the KvDtype's value), applied with that dtype's geometry.
  std::array<std::vector<int32_t>, 6> moves;
  std::array<size_t, 6> n_moves{};
  std::vector<int32_t> fresh_blocks;
  for (size_t l = 0; l < keep.size(); ++l) n_moves[static_cast<size_t>(s.layers[l].dtype)] += keep[l].size();
  for (size_t d = 0; d < moves.size(); ++d) moves[d].reserve(4 * n_moves[d]);
  fresh_blocks.reserve(static_cast<size_t>(need));
  for (size_t l = 0; l < keep.size(); ++l) {
    const LayerSlots &L = s.layers[l];
    const auto &k = keep[l];
    std::vector<int32_t> &pos = new_pos[l];
    pos.resize(k.size());
    for (size_t d = 0; d < k.size(); ++d) pos[d] = L.pos[static_cast<size_t>(k[d])];
    new_channels[l].resize(L.channels.size());
    for (size_t c = 0; c < L.channels.size(); ++c) {
      std::vector<float> &v = new_channels[l][c];
      v.resize(k.size());
      for (size_t d = 0; d < k.size(); ++d) v[d] = L.channels[c][static_cast<size_t>(k[d])];
    }
    new_tables[l].reserve(static_cast<size_t>(blocks_for(static_cast<int64_t>(k.size()), slots_per_block(L.dtype))));
  }
  try {
    // Copies of shared blocks first, then every layer's slot moves in one call (reads before writes: sources are
    // read from the old tables, which the moves may overwrite in place).
    for (size_t l = 0; l < keep.size(); ++l) {
      const LayerSlots &L = s.layers[l];
      const int32_t bs = slots_per_block(L.dtype);
      const auto &k = keep[l];
      const int32_t nb = blocks_for(static_cast<int64_t>(k.size()), bs);
      std::vector<int32_t> &dst = new_tables[l];
      dst.assign(L.blocks.begin(), L.blocks.begin() + nb);
      for (int32_t b = 0; b < nb; ++b) {
        if (block_changes(k, b, bs) && refcount_[static_cast<size_t>(dst[static_cast<size_t>(b)])] > 1) {
          int32_t fresh = alloc_block();
          fresh_blocks.push_back(fresh);  // reserved: cannot throw
          store_->copy_block(fresh, dst[static_cast<size_t>(b)]);  // slots that stay in place keep their data
          dst[static_cast<size_t>(b)] = fresh;
        }
      }
      for (size_t d = 0; d < k.size(); ++d) {
        const int32_t src = k[d];
        const int32_t db = dst[d / static_cast<size_t>(bs)];
        if (src == static_cast<int32_t>(d) && db == L.blocks[d / static_cast<size_t>(bs)]) continue;
        moves[static_cast<size_t>(L.dtype)].insert(moves[static_cast<size_t>(L.dtype)].end(), {L.blocks[static_cast<size_t>(src / bs)], src % bs, db, static_cast<int32_t>(d % static_cast<size_t>(bs))});
      }
    }
    // The store sizes its scratch before the first move, so a failure here has moved nothing.
    // Layers never share a block, so each dtype's moves can go on their own, in compaction order within it. The
    // group whose batch needs the most scratch goes first: the later ones reuse it, so only the first call can fail
    // for memory, and then nothing has moved.
    std::vector<size_t> order;
    for (size_t d = 0; d < moves.size(); ++d)
      if (!moves[d].empty()) order.push_back(d);
    auto scratch = [&](size_t d) {
      return std::min<int64_t>(static_cast<int64_t>(moves[d].size() / 4), KvStore::kMoveBatch) *
             kv_bytes(static_cast<KvDtype>(d), cfg_.head_dim);
    };
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scratch(a) > scratch(b); });
    for (size_t d : order) store_->move_slots(moves[d], geometry_of(static_cast<KvDtype>(d)));
  } catch (...) {
    for (int32_t b : fresh_blocks) release(b);
    throw;
  }
  for (size_t l = 0; l < keep.size(); ++l) {
    LayerSlots &L = s.layers[l];
    const int32_t nb = blocks_for(static_cast<int64_t>(keep[l].size()), slots_per_block(L.dtype));
    std::vector<int32_t> &dst = new_tables[l];
    // Blocks no longer referenced by this layer go back (shared ones just lose a reference).
    for (size_t b = 0; b < L.blocks.size(); ++b)
      if (b >= static_cast<size_t>(nb) || dst[b] != L.blocks[b]) release(L.blocks[b]);
    L.blocks = std::move(dst);
    L.pos = std::move(new_pos[l]);
    for (size_t c = 0; c < L.channels.size(); ++c) L.channels[c] = std::move(new_channels[l][c]);
  }
  return_memory();
}

std::vector<int32_t> KvCache::alloc_blocks(int64_t n) {
  if (n < 0 || n > free_blocks())
    fail(Status::kv_full, "KV cache full: " + std::to_string(n) + " blocks needed, " + std::to_string(free_blocks()) + " free");
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.push_back(alloc_block());
  return out;
}

void KvCache::release_blocks(const std::vector<int32_t> &blocks) {
  for (int32_t b : blocks) release(b);
  return_memory();
}

void KvCache::adopt(int32_t id, SeqCache &&s) {
  bool ok = seqs_.count(id) == 0 && s.layers.size() == static_cast<size_t>(cfg_.n_layer) &&
            s.window_q.size() == static_cast<size_t>(cfg_.n_layer);
  for (const LayerSlots &L : s.layers) {
    const int32_t bs = slots_per_block(L.dtype);
    ok = ok && bs > 0 && static_cast<int32_t>(L.blocks.size()) == blocks_for(L.n(), bs);
    for (const auto &ch : L.channels) ok = ok && ch.size() == L.pos.size();
  }
  if (!ok) {
    release_all(s);
    return_memory();
    fail(Status::invalid_argument, "adopt: sequence " + std::to_string(id) + " exists or does not fit the cache layout");
  }
  insert_or_release(id, std::move(s));
}

PagedKv KvCache::view(int32_t id, int32_t layer) {
  LayerSlots &L = seq_mut(id).layers.at(static_cast<size_t>(layer));
  PagedKv v = geometry_of(L.dtype);
  v.block_table = L.blocks.data();
  v.n_slots = L.n();
  return v;
}

void KvCache::check_invariants() const {
  std::vector<int32_t> refs(refcount_.size(), 0);
  for (const auto &kv : seqs_) {
    for (size_t l = 0; l < kv.second.layers.size(); ++l) {
      const LayerSlots &L = kv.second.layers[l];
      const std::string where = "sequence " + std::to_string(kv.first) + " layer " + std::to_string(l);
      const int32_t bs = slots_per_block(L.dtype);
      if (bs < 1) fail(Status::internal, where + ": dtype holds no slot in a block");
      if (static_cast<int32_t>(L.blocks.size()) != blocks_for(L.n(), bs)) fail(Status::internal, where + ": block count does not fit slots");
      for (const auto &ch : L.channels)
        if (ch.size() != L.pos.size()) fail(Status::internal, where + ": slot channel size differs");
      for (size_t j = 1; j < L.pos.size(); ++j)
        if (L.pos[j] <= L.pos[j - 1]) fail(Status::internal, where + ": positions not ascending");
      if (!L.pos.empty() && L.pos.back() >= kv.second.length) fail(Status::internal, where + ": position beyond length");
      for (int32_t b : L.blocks) {
        if (b < 0 || b >= static_cast<int32_t>(refs.size())) fail(Status::internal, where + ": block id out of range");
        ++refs[static_cast<size_t>(b)];
      }
      // The observation window: one row of n_q_dim floats per recorded position, in every layer that records.
      const size_t rows = l < kv.second.window_q.size() ? kv.second.window_q[l].size() : 0;
      if (rows != 0 && rows != kv.second.window_pos.size() * static_cast<size_t>(cfg_.n_q_dim))
        fail(Status::internal, where + ": window rows do not match the window's positions");
    }
  }
  std::vector<char> is_free(refcount_.size(), 0);
  for (int32_t b : free_) {
    if (is_free[static_cast<size_t>(b)]) fail(Status::internal, "block " + std::to_string(b) + " twice in the free list");
    is_free[static_cast<size_t>(b)] = 1;
  }
  for (size_t b = 0; b < refs.size(); ++b) {
    if (refs[b] != refcount_[b])
      fail(Status::internal, "block " + std::to_string(b) + " has refcount " + std::to_string(refcount_[b]) + " but " +
                                 std::to_string(refs[b]) + " references");
    if ((refs[b] == 0) != (is_free[b] != 0)) fail(Status::internal, "block " + std::to_string(b) + " free-list state is wrong");
  }
}

}  // namespace infokv
