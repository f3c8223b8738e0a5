#include "session/session.hpp"

#include "backend/device.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "util/error.hpp"
#include "util/sys_memory.hpp"
#include "util/limits.hpp"

namespace infokv {

namespace {

constexpr int32_t kEntropyChunk = 64;  // forward rows per chunk when the policy scores entropy

// Pool size in blocks. free_bytes: the backend's free memory (-1 when unknown); default_fraction: the share of it the
// backend takes when no size is given (0: from the context, at most 1 GiB).
// device_bytes: the most memory the device can give a pool (-1 when unknown); an explicit size beyond it is refused
// here, before the 8 bytes a block of bookkeeping are allocated and long before the pool runs the machine out of
// memory.
int64_t default_pool_blocks(const HParams &hp, const SessionOptions &o, int64_t free_bytes, double default_fraction,
                            int64_t device_bytes) {
  const int64_t block_bytes = int64_t{2} * hp.n_head_kv * o.block_size * kv_bytes(o.kv_dtype, hp.head_dim);
  if (o.kv_pool_blocks > 0 || o.kv_pool_bytes > 0) {
    const int64_t blocks = o.kv_pool_blocks > 0 ? o.kv_pool_blocks : std::max<int64_t>(1, o.kv_pool_bytes / block_bytes);
    if (device_bytes >= 0 && blocks > device_bytes / block_bytes) {
      const double asked = static_cast<double>(blocks) * static_cast<double>(block_bytes);
      fail(Status::out_of_memory, "KV pool of " + std::to_string(blocks) + " blocks (" +
                                      std::to_string(static_cast<int64_t>(asked / 1048576.0)) + " MiB) is larger than the " +
                                      std::to_string(device_bytes >> 20) + " MiB the device can hold");
    }
    return blocks;
  }
  const int64_t tokens = int64_t{4} * hp.n_ctx_train;
  const int64_t ctx_blocks = (tokens + o.block_size - 1) / o.block_size * hp.n_layer;
  int64_t cap = (int64_t{1} << 30) / block_bytes;  // CPU default
  const double fraction = o.kv_pool_fraction > 0 ? o.kv_pool_fraction : default_fraction;
  if (fraction > 0) {
    if (free_bytes < 0) fail(Status::unsupported, "kv_pool_fraction: this device does not report its free memory");
    cap = static_cast<int64_t>(fraction * static_cast<double>(free_bytes)) / block_bytes;
    if (cap < hp.n_layer)
      fail(Status::out_of_memory, "KV pool: " + std::to_string(static_cast<int64_t>(fraction * 100)) + "% of the " +
                                      std::to_string(free_bytes >> 20) + " MiB free holds fewer than one block per layer");
  }
  return std::max<int64_t>(hp.n_layer, std::min(ctx_blocks, cap));
}

}  // namespace

Session::Session(std::shared_ptr<const Model> model, const SessionOptions &opts) : model_(std::move(model)), opts_(opts) {
  init(nullptr);
}

Session::Session(std::shared_ptr<const Model> model, const SessionOptions &opts, std::unique_ptr<DeviceForward> backend)
    : model_(std::move(model)), opts_(opts) {
  if (!backend) fail(Status::invalid_argument, "session needs a backend");
  init(std::move(backend));
}

void Session::init(std::unique_ptr<DeviceForward> backend) {
  if (!model_) fail(Status::invalid_argument, "session needs a model");
  if (opts_.n_threads < 0 || opts_.n_threads > limits::max_threads)
    fail(Status::invalid_argument, "n_threads must be in [0, " + std::to_string(limits::max_threads) + "]");
  if (opts_.block_size < 1 || opts_.block_size > limits::max_block_size)
    fail(Status::invalid_argument, "block_size must be in [1, " + std::to_string(limits::max_block_size) + "]");
  if (opts_.ubatch < 1) opts_.ubatch = 256;
  if (opts_.kv_pool_blocks < 0 || opts_.kv_pool_bytes < 0) fail(Status::invalid_argument, "KV pool size must not be negative");
  if (!(opts_.kv_pool_fraction >= 0 && opts_.kv_pool_fraction <= 1))
    fail(Status::invalid_argument, "kv_pool_fraction must be in (0, 1], or 0 for the default");
  if (opts_.max_sequences < 1 || opts_.max_sequences > (1 << 20))
    fail(Status::invalid_argument, "max_sequences must be in [1, 2^20]");
  if (opts_.protect_prefix < 0) fail(Status::invalid_argument, "protect_prefix must not be negative");
  opts_.compression.validate();  // before any device or pool is touched (the compressor made last checks it again)
  const HParams &hp = model_->hparams();
  KvCache::check_dtype(opts_.kv_dtype, hp.head_dim);  // before the pool is sized in its block bytes
  pool_ = std::make_unique<ThreadPool>(opts_.n_threads > 0 ? opts_.n_threads : default_thread_count());
  device_ = backend ? std::move(backend)
                    : make_device_forward(*model_, select_device(opts_.device), pool_.get());  // throws no_device / invalid_argument
  if (kv_dtype_quantised(opts_.kv_dtype) && device_->describe() != "cpu")
    fail(Status::unsupported, std::string("KV dtype ") + kv_dtype_name(opts_.kv_dtype) + " runs on the CPU backend; the " +
                                  device_->describe() + " backend stores K/V as f32, f16 or bf16");
  KvConfig kc;
  kc.n_layer = hp.n_layer;
  kc.n_kv_heads = hp.n_head_kv;
  kc.head_dim = hp.head_dim;
  kc.n_q_dim = hp.n_head * hp.head_dim;
  kc.block_size = opts_.block_size;
  kc.dtype = opts_.kv_dtype;
  kc.layer_dtypes = device_->describe() == "cpu";  // the CPU's kernels read every dtype
  // The host pool is committed lazily, so what bounds it is physical memory, not what happens to be free now; a
  // device pool is allocated whole, so there it is free memory.
  const int64_t free_bytes = device_->free_memory();
  const int64_t device_bytes = device_->describe() == "cpu" ? physical_memory_bytes() : free_bytes;
  kc.n_blocks = default_pool_blocks(hp, opts_, free_bytes, device_->default_pool_fraction(), device_bytes);
  kv_ = std::make_unique<KvCache>(
      kc, [this](const PagedKv &g, int64_t n_blocks) { return device_->make_kv_store(g, n_blocks); });
  DeviceForward *dev = device_.get();
  compressor_ = std::make_unique<Compressor>(
      *model_, *kv_, *pool_, static_cast<EvidenceSource &>(*this),
      [dev](float *out, const float *q, const int32_t *vis, int32_t rows, const PagedKv &kv, int32_t n_heads, float scale) {
        dev->window_probs(out, q, vis, rows, kv, n_heads, scale);
      },
      opts_.compression);
}

Session::~Session() = default;

Session::SeqState &Session::state(int32_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) fail(Status::not_found, "no sequence " + std::to_string(seq));
  return it->second;
}

const Session::SeqState &Session::state(int32_t seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) fail(Status::not_found, "no sequence " + std::to_string(seq));
  return it->second;
}

int32_t Session::free_id() {
  while (kv_->has(next_id_) || next_id_ < 0) next_id_ = next_id_ < 0 ? 0 : next_id_ + 1;
  return next_id_;
}

void Session::insert_states(int32_t id, SeqState st, SeqCompression cst) {
  try {
    seqs_.emplace(id, std::move(st));
    compressor_->set_state(id, std::move(cst));
  } catch (...) {
    seqs_.erase(id);
    throw;
  }
}

int32_t Session::add_sequence() {
  check_room_for_sequences(1);
  SeqCompression cst;
  if (opts_.protect_prefix > 0) add_span(cst.spans, ProtectedSpan{0, opts_.protect_prefix, false});
  const int32_t id = free_id();
  kv_->add(id);
  try {
    insert_states(id, SeqState{}, std::move(cst));
  } catch (...) {
    kv_->remove(id);
    throw;
  }
  ++next_id_;
  return id;
}

int32_t Session::adopt_sequence(SeqCache &&cache, SeqState &&st, SeqCompression &&cst) {
  if (sequence_count() >= opts_.max_sequences) {
    // The caller passed its block references to this call (restore checks the count first; this is the backstop).
    for (const LayerSlots &L : cache.layers) kv_->release_blocks(L.blocks);
    check_room_for_sequences(1);
  }
  const int32_t id = free_id();
  try {
    insert_states(id, std::move(st), std::move(cst));
  } catch (...) {
    for (const LayerSlots &L : cache.layers) kv_->release_blocks(L.blocks);
    throw;
  }
  try {
    kv_->adopt(id, std::move(cache));  // releases the blocks itself when it fails
  } catch (...) {
    seqs_.erase(id);
    compressor_->remove(id);
    throw;
  }
  ++next_id_;
  return id;
}

void Session::remove_sequence(int32_t seq) {
  kv_->remove(seq);
  seqs_.erase(seq);
  compressor_->remove(seq);
}

int32_t Session::fork_sequence(int32_t src) {
  const SeqState &s = state(src);
  check_room_for_sequences(1);
  check_host_memory_for_fork(src);
  const int32_t id = free_id();
  kv_->fork(src, id);
  try {
    insert_states(id, s, compressor_->state(src));
  } catch (...) {
    kv_->remove(id);
    throw;
  }
  ++next_id_;
  return id;
}

void Session::truncate(int32_t seq, int64_t length) {
  SeqState &s = state(seq);
  kv_->truncate(seq, length);
  s.tokens.resize(static_cast<size_t>(length));
  // The logits no longer belong to the last token: the caller must decode again before sampling.
  s.has_logits = false;
  s.logits.clear();
  s.pending_entropy = 0.0f;
}

void Session::remove_range(int32_t seq, int64_t begin, int64_t end) {
  state(seq);
  kv_->remove_range(seq, begin, end);
}

SeqInfo Session::info(int32_t seq) const {
  const SeqCache &c = kv_->seq(seq);
  SeqInfo i;
  i.length = c.length;
  for (const LayerSlots &L : c.layers) {
    i.kept_per_layer.push_back(L.n());
    i.blocks += static_cast<int64_t>(L.blocks.size());
  }
  i.bytes = i.blocks * kv_->block_bytes();
  const int32_t bs = kv_->config().block_size;
  i.uncompressed_bytes = (c.length + bs - 1) / bs * static_cast<int64_t>(c.layers.size()) * kv_->block_bytes();
  return i;
}

const std::vector<int32_t> &Session::tokens(int32_t seq) const { return state(seq).tokens; }

const std::vector<float> &Session::logits(int32_t seq) const {
  const SeqState &s = state(seq);
  if (!s.has_logits) fail(Status::bad_state, "sequence " + std::to_string(seq) + " has no logits yet: decode first");
  return s.logits;
}

std::vector<int32_t> Session::check_batch(const std::vector<BatchToken> &batch, std::map<int32_t, int32_t> &counts) const {
  if (batch.empty()) fail(Status::invalid_argument, "empty batch");
  const int32_t n_vocab = model_->hparams().n_vocab;
  for (size_t i = 0; i < batch.size(); ++i) {
    const BatchToken &b = batch[i];
    if (!kv_->has(b.seq)) fail(Status::not_found, "batch item " + std::to_string(i) + ": no sequence " + std::to_string(b.seq));
    if (b.token < 0 || b.token >= n_vocab)
      fail(Status::out_of_range, "batch item " + std::to_string(i) + ": token " + std::to_string(b.token) +
                                     " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
    ++counts[b.seq];
  }
  // Positions continue each sequence's logical length.
  std::vector<int32_t> positions(batch.size());
  std::map<int32_t, int64_t> next;
  for (const auto &kv : counts) next[kv.first] = kv_->seq(kv.first).length;
  for (size_t i = 0; i < batch.size(); ++i) {
    int64_t p = next[batch[i].seq]++;
    if (p >= (int64_t{1} << 31) - 1) fail(Status::out_of_range, "sequence too long");
    positions[i] = static_cast<int32_t>(p);
  }
  return positions;
}

void Session::make_room(const std::map<int32_t, int32_t> &counts) {
  std::vector<int32_t> ids, cnts;
  for (const auto &kv : counts) {
    ids.push_back(kv.first);
    cnts.push_back(kv.second);
  }
  int64_t need = kv_->blocks_needed(ids, cnts);
  if (need > kv_->free_blocks() && compressor_->config().enabled()) {
    // All or nothing: throws kv_full having compressed nothing. During prefill() only its sequence may give room.
    compressor_->relieve_pressure(counts, need, prefill_seq_);
    need = kv_->blocks_needed(ids, cnts);
  }
  if (need > kv_->free_blocks())
    fail(Status::kv_full, "KV cache full: this step needs " + std::to_string(need) + " blocks, " +
                              std::to_string(kv_->free_blocks()) + " are free (pool of " +
                              std::to_string(kv_->stats().blocks_total) + ")");
}

void Session::after_step(const std::map<int32_t, int32_t> &counts) {
  Compressor &cmp = *compressor_;
  if (!cmp.config().enabled()) {
    for (const auto &kv : counts) seqs_[kv.first].prefilled = true;
    return;
  }
  std::vector<int32_t> prefill, decoded;
  for (const auto &kv : counts) {
    const int32_t id = kv.first;
    SeqState &s = seqs_[id];
    cmp.appended(id, kv.second);
    // prefill() decides for its own chunks.
    if (!s.prefilled) {
      s.prefilled = true;
      if (cmp.config().compress_after_prefill && id != prefill_seq_) prefill.push_back(id);
    } else if (id != prefill_seq_ && cmp.compression_due(id)) {
      decoded.push_back(id);
    }
  }
  // The compressor tells a prefill compression (pooling kernel 5) from a decoding one (7) by its count.
  cmp.compress_over_budget(prefill);
  cmp.compress_over_budget(decoded);
}

void Session::decode(const std::vector<BatchToken> &batch) {
  std::map<int32_t, int32_t> counts;
  const std::vector<int32_t> positions = check_batch(batch, counts);
  make_room(counts);

  // Rows whose logits are computed: flagged ones and the last of each sequence.
  std::map<int32_t, size_t> last_item;
  for (size_t i = 0; i < batch.size(); ++i) last_item[batch[i].seq] = i;
  std::vector<size_t> logit_rows;
  for (size_t i = 0; i < batch.size(); ++i)
    if (batch[i].logits || last_item[batch[i].seq] == i) logit_rows.push_back(i);

  // What a failure must restore: the slot counts and lengths. What the step observed (attention sums, window rows,
  // the new slots' entropy) is held in `steps` and applied only on commit.
  struct Saved { std::vector<int32_t> n; int64_t length; };
  std::map<int32_t, Saved> saved;
  std::map<int32_t, SeqState> staged;
  std::map<int32_t, StepObservations> steps;
  for (const auto &kv : counts) {
    const int32_t id = kv.first;
    const SeqCache &c = kv_->seq(id);
    Saved s;
    for (const LayerSlots &L : c.layers) s.n.push_back(L.n());
    s.length = c.length;
    saved.emplace(id, std::move(s));
    staged.emplace(id, state(id));
    steps.emplace(id, StepObservations{});
  }
  std::vector<float> out_logits;
  try {
    forward(batch, positions, out_logits, logit_rows, staged, steps);
    for (const auto &st : steps) kv_->prepare_step(st.first, st.second, compressor_->window_capacity());
  } catch (...) {
    for (auto &kv : saved) kv_->shrink_to(kv.first, kv.second.n, kv.second.length);
    throw;
  }
  // Commit: nothing below fails.
  for (const auto &st : steps) {
    kv_->commit_step(st.first, st.second, compressor_->window_capacity());
    compressor_->observe(st.first, st.second);
  }
  batch_logits_.clear();
  const size_t V = static_cast<size_t>(model_->hparams().n_vocab);
  for (size_t r = 0; r < logit_rows.size(); ++r) {
    const size_t i = logit_rows[r];
    if (batch[i].logits) batch_logits_.insert(batch_logits_.end(), out_logits.begin() + r * V, out_logits.begin() + (r + 1) * V);
  }
  for (auto &kv : staged) {
    for (size_t r = 0; r < logit_rows.size(); ++r)
      if (logit_rows[r] == last_item[kv.first])
        kv.second.logits.assign(out_logits.begin() + r * V, out_logits.begin() + (r + 1) * V);
    kv.second.has_logits = true;
    seqs_[kv.first] = std::move(kv.second);
  }
  for (size_t i = 0; i < batch.size(); ++i) seqs_[batch[i].seq].tokens.push_back(batch[i].token);
  after_step(counts);
}

void Session::prefill(int32_t seq, const std::vector<int32_t> &tokens) {
  if (tokens.empty()) return;
  PrefillCursor cursor;
  prefill_part(seq, tokens, &cursor, tokens.size());
}

size_t Session::prefill_part(int32_t seq, const std::vector<int32_t> &message, PrefillCursor *cursor,
                             size_t max_tokens) {
  if (cursor == nullptr) fail(Status::invalid_argument, "prefill_part: no cursor");
  if (message.empty() || max_tokens == 0) fail(Status::invalid_argument, "prefill_part: nothing to prefill");
  if (!kv_->has(seq)) fail(Status::not_found, "no sequence " + std::to_string(seq));
  PrefillCursor &cur = *cursor;
  const int64_t length = kv_->seq(seq).length;
  if (cur.done >= message.size())
    fail(Status::bad_state, "prefill_part: the message is already in");
  if (cur.started &&
      length != cur.end_length - static_cast<int64_t>(message.size()) + static_cast<int64_t>(cur.done))
    fail(Status::bad_state, "prefill_part: sequence " + std::to_string(seq) + " is not where this message's cursor left it");
  Compressor &cmp = *compressor_;
  const CompressionConfig cc = cmp.config();
  const size_t ubatch = static_cast<size_t>(opts_.ubatch);
  const size_t left = message.size() - cur.done;
  const size_t part = max_tokens >= left ? left : std::max(ubatch, max_tokens / ubatch * ubatch);
  // A part ends where the whole message's chunks would (next_cut): never leaving a short last chunk behind.
  const size_t begin = cur.done, end = next_cut(message.size(), begin, std::min(part, left));
  const bool whole = begin == 0 && end == message.size();
  PrefillCursor next = cur;
  if (!next.started) {
    next.started = true;
    next.was_prefilled = state(seq).prefilled;
    next.end_length = length + static_cast<int64_t>(message.size());
  }
  next.done = end;
  // Without a policy, or a whole message as one chunk that fits: one decode(), which compresses as after any step.
  if (!cc.enabled() ||
      (whole && message.size() <= ubatch && chunk_that_fits(seq, message.size()) == message.size())) {
    decode_tokens(seq, message, begin, end);
    cur = next;
    return end - begin;
  }
  // Compression part-way evicts for good, so a failure part-way is undone from a copy: an empty sequence needs none
  // (it is emptied again); otherwise a fork holds the old blocks (shared, no copy) until the part is in.
  SeqState saved = state(seq);
  SeqCompression saved_cmp = cmp.state(seq);
  const bool was_empty = kv_->seq(seq).length == 0;
  const int32_t backup = was_empty ? -1 : fork_sequence(seq);
  try {
    // The chunks' own decodes neither count as "the" prefill nor trigger compression: this function decides (see
    // decode()). Memory pressure during the chunks may compress only this sequence: another one's evictions could
    // not be undone if a later chunk failed.
    prefill_seq_ = seq;
    struct Restore {
      Session &s;
      ~Restore() { s.prefill_seq_ = -1; }
    } restore{*this};
    const int32_t end_budget = cmp.budget_at(next.end_length);
    // The most a message may hold before its end: kPrefillCeiling x the budget it will have at its end.
    const double ceiling = cc.has_budget() ? kPrefillCeiling * static_cast<double>(end_budget) : INFINITY;
    for (size_t b = begin; b < end;) {
      const size_t want = next_cut(end, b, ubatch) - b;
      // Past the ceiling, a gentle compression: to the end budget, not the (smaller) current one.
      if (cmp.mean_kept(seq) + static_cast<double>(want) > ceiling && cmp.mean_kept(seq) > end_budget)
        cmp.try_compress(seq, end_budget);
      size_t n = chunk_that_fits(seq, want);
      if (n == 0) {
        // Memory requires it: compress to the end budget, or to the current one if the sequence holds less (a
        // quality target alone: as its target allows), and take what then fits.
        if (!cc.has_budget()) {
          cmp.try_compress(seq, 0);
        } else {
          const int32_t target = cmp.mean_kept(seq) > end_budget ? end_budget : cmp.budget_for(seq);
          if (cmp.mean_kept(seq) > target) cmp.try_compress(seq, target);
        }
        n = chunk_that_fits(seq, want);
      }
      // Nothing fits even so: one token, which decode() refuses with KV full having changed nothing.
      n = std::max<size_t>(n, 1);
      if (n < want) next.cut_short = true;
      decode_tokens(seq, message, b, b + n);
      b += n;
    }
    // The end of the message: as decode() after a step, compressed to the budget after the sequence's first decode
    // (compress_after_prefill), later when the trigger asks.
    if (end == message.size() && (next.was_prefilled ? cmp.compression_due(seq) : cc.compress_after_prefill))
      cmp.compress_over_budget({seq});
  } catch (...) {
    kv_->remove(seq);
    if (was_empty) {
      kv_->add(seq);
    } else {
      kv_->rename(backup, seq);
      seqs_.erase(backup);
      cmp.remove(backup);
    }
    seqs_[seq] = std::move(saved);
    cmp.set_state(seq, std::move(saved_cmp));  // both moved: restoring them allocates nothing
    throw;
  }
  if (backup >= 0) remove_sequence(backup);
  cur = next;
  return end - begin;
}

void Session::decode_tokens(int32_t seq, const std::vector<int32_t> &tokens, size_t b, size_t e) {
  std::vector<BatchToken> batch;
  batch.reserve(e - b);
  for (size_t i = b; i < e; ++i) batch.push_back({seq, tokens[i], false});
  decode(batch);
}

int32_t Session::forward_piece() const {
  return compressor_->config().needs_entropy() ? std::min(opts_.ubatch, kEntropyChunk) : opts_.ubatch;
}

int64_t Session::cut_invariant_from() const {
  const int64_t from = device_->chunk_invariant_from();
  // Balancing the last two chunks leaves both at least `from` long only when a chunk holds two.
  return from > 0 && opts_.ubatch >= 2 * from && forward_piece() >= 2 * from ? from : 0;
}

size_t Session::next_cut(size_t size, size_t b, size_t len) const {
  size_t e = std::min(size, b + len);
  const auto from = static_cast<size_t>(cut_invariant_from());
  if (size - e > 0 && size - e < from) e = size - from;  // the last chunk would be short: this one gives it tokens
  return e;
}

size_t Session::chunk_that_fits(int32_t seq, size_t n) {
  const int64_t free = kv_->free_blocks();
  auto fits = [&](size_t k) { return kv_->blocks_needed({seq}, {static_cast<int32_t>(k)}) <= free; };
  if (fits(n)) return n;
  size_t lo = 0, hi = n;  // fits(lo), !fits(hi)
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

void Session::forward(const std::vector<BatchToken> &items, const std::vector<int32_t> &positions,
                      std::vector<float> &out_logits, const std::vector<size_t> &logit_rows,
                      std::map<int32_t, SeqState> &staged, std::map<int32_t, StepObservations> &steps) {
  const CompressionConfig &cc = compressor_->config();
  const size_t V = static_cast<size_t>(model_->hparams().n_vocab);
  out_logits.assign(logit_rows.size() * V, 0.0f);
  std::vector<char> row_wanted(items.size(), 0);
  std::vector<size_t> row_slot(items.size(), 0);
  for (size_t r = 0; r < logit_rows.size(); ++r) {
    row_wanted[logit_rows[r]] = 1;
    row_slot[logit_rows[r]] = r;
  }
  // Entropy scoring keeps every layer's hidden state of a chunk until the last layer is done (nl x T x d floats:
  // 17.7 MB for SmolLM2 at 256 rows): its chunks are capped so that this transient stays small.
  const size_t ub = static_cast<size_t>(forward_piece());
  std::vector<int32_t> tokens;
  std::vector<float> lg;
  for (size_t c0 = 0, c1 = 0; c0 < items.size(); c0 = c1) {
    c1 = next_cut(items.size(), c0, ub);
    ForwardChunk c;
    c.T = static_cast<int64_t>(c1 - c0);
    c.positions = positions.data() + c0;
    tokens.clear();
    for (size_t i = c0; i < c1; ++i) tokens.push_back(items[i].token);
    c.tokens = tokens.data();
    // Group the chunk's items by sequence (ascending positions within each) and reserve their slots.
    std::map<int32_t, std::vector<int64_t>> by_seq;
    for (size_t i = c0; i < c1; ++i) by_seq[items[i].seq].push_back(static_cast<int64_t>(i - c0));
    for (auto &g : by_seq) {
      std::vector<int32_t> pos;
      for (int64_t t : g.second) pos.push_back(positions[c0 + static_cast<size_t>(t)]);
      kv_->append_slots(g.first, pos.data(), static_cast<int32_t>(pos.size()));
      c.groups.push_back(ForwardGroup{g.first, std::move(g.second), &staged.at(g.first).pending_entropy, &steps.at(g.first)});
    }
    for (size_t i = c0; i < c1; ++i)
      if (row_wanted[i]) c.logit_rows.push_back(static_cast<int64_t>(i - c0));
    c.attention_acc = cc.needs_accumulated_attention();
    c.entropy = cc.needs_entropy();
    c.entropy_top_k = cc.entropy_top_k;
    c.window_rows = cc.needs_window_queries() ? compressor_->window_capacity() : 0;
    lg.assign(c.logit_rows.size() * V, 0.0f);
    device_->forward_chunk(c, *kv_, lg.data());
    for (size_t r = 0; r < c.logit_rows.size(); ++r) {
      const size_t i = c0 + static_cast<size_t>(c.logit_rows[r]);
      std::copy_n(lg.begin() + static_cast<int64_t>(r * V), V, out_logits.begin() + static_cast<int64_t>(row_slot[i] * V));
    }
  }
}

}  // namespace infokv
