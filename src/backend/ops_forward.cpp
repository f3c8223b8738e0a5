// The forward pass, written once over DeviceOps: weights resident on the device (as DeviceOps::matrix decides),
// activations in f32, the KV block pool in the device's memory (same block ids and layout as the host KvCache's
// tables), one upload of the block tables per chunk and one synchronisation (the downloads at its end).
// It also observes, on the device, what compression asked for (DESIGN.md §4) and records it on the host in the
// groups' StepObservations: H2O attention sums, the observation window's query rows, entropy and representation change.
#include <algorithm>
#include <deque>
#include <cmath>

#include "backend/device_forward.hpp"
#include "backend/device_ops.hpp"
#include "kv/kv_cache.hpp"
#include "model/model.hpp"
#include "util/error.hpp"

namespace infokv {

namespace {

// LM-head rows computed at once when every row's entropy is needed: bounds that buffer by a small chunk.
constexpr int64_t kLmRows = 32;  // see plan_chunk

class OpsKvStore final : public KvStore {
 public:
  OpsKvStore(DeviceOps &ops, const PagedKv &g, int64_t n_blocks) : ops_(ops), g_(g) {
    ops_.activate();
    pool_.ensure(ops_, static_cast<size_t>(g.block_stride * n_blocks));
    g_.pool = pool_.as<uint8_t>();
  }
  uint8_t *base() const override { return g_.pool; }
  void copy_block(int32_t dst, int32_t src) override {
    ops_.activate();
    ops_.copy(at(dst), at(src), static_cast<size_t>(g_.block_stride));
  }
  void move_slots(const std::vector<int32_t> &moves, const PagedKv &layer) override {
    ops_.activate();
    const int64_t n = static_cast<int64_t>(moves.size() / 4);
    if (n == 0) return;
    moves_.ensure(ops_, moves.size() * 4);
    PagedKv g = g_;
    g.dtype = layer.dtype;
    g.block_size = layer.block_size;
    // Batches in stream order (see KvStore::move_slots): the scratch is bounded by a batch.
    const int64_t batch = std::min(n, kMoveBatch);
    scratch_.ensure(ops_, static_cast<size_t>(batch * 2 * g.n_kv_heads * kv_bytes(g.dtype, g.head_dim)));
    // `moves` is the caller's and may go away on return: a pageable-memory upload has copied it to a staging
    // buffer before the call returns (CUDA's documented behaviour), so no synchronisation is needed here.
    ops_.upload(moves_.as<int32_t>(), moves.data(), moves.size() * 4);
    for (int64_t i = 0; i < n; i += batch)
      ops_.kv_move_slots(g, moves_.as<int32_t>() + 4 * i, std::min(batch, n - i), scratch_.as<uint8_t>());
  }
  void read_blocks(const std::vector<int32_t> &ids, uint8_t *out) const override {
    ops_.activate();
    for (size_t i = 0; i < ids.size(); ++i) ops_.download(out + i * static_cast<size_t>(g_.block_stride), at(ids[i]), static_cast<size_t>(g_.block_stride));
    ops_.sync();
  }
  void write_blocks(const std::vector<int32_t> &ids, const uint8_t *in) override {
    ops_.activate();
    for (size_t i = 0; i < ids.size(); ++i) ops_.upload(at(ids[i]), in + i * static_cast<size_t>(g_.block_stride), static_cast<size_t>(g_.block_stride));
    ops_.sync();
  }

 private:
  uint8_t *at(int32_t b) const { return g_.pool + static_cast<int64_t>(b) * g_.block_stride; }
  DeviceOps &ops_;
  PagedKv g_;
  DevBuf pool_, moves_, scratch_;
};

struct DevLayer {
  const float *attn_norm = nullptr, *ffn_norm = nullptr;
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr;  // null when the model has no such bias
  const float *k_shift = nullptr;  // -bk (null without a K bias): what a quantised cache subtracts from K
  DevMatrix wq, wk, wv, wo, gate, up, down;
};

// A bias vector on the device, or null for an empty one.
const float *optional_vec(DeviceOps &o, const std::vector<float> &v) { return v.empty() ? nullptr : o.vec(v); }

// Contiguous runs (first, length) of an ascending index list.
std::vector<std::pair<int64_t, int64_t>> runs_of(const std::vector<int64_t> &idx) {
  std::vector<std::pair<int64_t, int64_t>> r;
  for (int64_t i : idx) {
    if (!r.empty() && r.back().first + r.back().second == i) ++r.back().second;
    else r.emplace_back(i, 1);
  }
  return r;
}

class OpsForward final : public DeviceForward {
 public:
  OpsForward(const Model &m, std::unique_ptr<DeviceOps> ops) : model_(m), ops_(std::move(ops)) {
    ops_->activate();
    const HParams &hp = m.hparams();
    layers_.resize(static_cast<size_t>(hp.n_layer));
    for (int32_t l = 0; l < hp.n_layer; ++l) {
      const LayerWeights &L = m.layer(l);
      DevLayer &D = layers_[static_cast<size_t>(l)];
      D.attn_norm = ops_->vec(L.attn_norm);
      D.ffn_norm = ops_->vec(L.ffn_norm);
      D.wq = ops_->matrix(m, L.wq);
      D.wk = ops_->matrix(m, L.wk);
      D.wv = ops_->matrix(m, L.wv);
      D.wo = ops_->matrix(m, L.wo);
      D.bq = optional_vec(*ops_, L.bq);
      D.bk = optional_vec(*ops_, L.bk);
      if (!L.bk.empty()) {  // vec() may keep pointing at the host vector (the CPU does): it lives here
        std::vector<float> &neg = k_shift_host_.emplace_back(L.bk.size());
        for (size_t i = 0; i < neg.size(); ++i) neg[i] = -L.bk[i];
        D.k_shift = ops_->vec(neg);
      }
      D.bv = optional_vec(*ops_, L.bv);
      D.bo = optional_vec(*ops_, L.bo);
      D.gate = ops_->matrix(m, L.w_gate);
      D.up = ops_->matrix(m, L.w_up);
      D.down = ops_->matrix(m, L.w_down);
    }
    emb_ = ops_->matrix(m, m.token_embd());
    out_ = m.tied_output() ? emb_ : ops_->matrix(m, m.output());
    out_norm_ = ops_->vec(m.output_norm());
    set_rope_freqs(0);
  }

  std::string describe() const override { return ops_->name(); }
  int64_t free_memory() const override {
    ops_->activate();
    return ops_->free_memory();
  }
  double default_pool_fraction() const override { return ops_->default_pool_fraction(); }
  int64_t chunk_invariant_from() const override { return ops_->chunk_invariant_from(); }

  std::unique_ptr<KvStore> make_kv_store(const PagedKv &geometry, int64_t n_blocks) override {
    return ops_->make_kv_store(geometry, n_blocks);
  }

  void window_probs(float *out, const float *q, const int32_t *vis, int32_t rows, const PagedKv &kv, int32_t n_heads,
                    float scale) override {
    const int64_t qd = static_cast<int64_t>(n_heads) * kv.head_dim, n = kv.n_slots;
    // No rows (a sequence restored without observation-window queries) or no slots: nothing to score, and no
    // zero-byte copies from null buffers.
    if (rows <= 0 || n <= 0) return;
    DeviceOps &o = *ops_;
    o.activate();
    DevBuf table, dq, dp;
    const int32_t nb = (kv.n_slots + kv.block_size - 1) / kv.block_size;
    table.ensure(o, static_cast<size_t>(nb) * 4);
    dq.ensure(o, static_cast<size_t>(rows * qd) * 4);
    dp.ensure(o, static_cast<size_t>(rows * n) * 4);
    o.upload(table.as<int32_t>(), kv.block_table, static_cast<size_t>(nb) * 4);
    o.upload(dq.as<float>(), q, static_cast<size_t>(rows * qd) * 4);
    o.zero(dp.as<float>(), static_cast<size_t>(rows * n) * 4);
    PagedKv v = kv;
    v.block_table = table.as<int32_t>();
    for (int32_t r = 0; r < rows; ++r) {
      if (vis[r] <= 0) continue;
      v.n_slots = std::min(vis[r], kv.n_slots);
      o.attention_probs_mean(dp.as<float>() + r * n, dq.as<float>() + r * qd, 1, n_heads, v, v.n_slots, scale);
    }
    o.download(out, dp.as<float>(), static_cast<size_t>(rows * n) * 4);
    o.sync();
  }

  void forward_chunk(const ForwardChunk &c, KvCache &kv, float *out) override {
    ops_->activate();
    const ChunkPlan p = plan_chunk(c, kv);
    bool decode_batch = c.groups.size() > 1;
    for (const ForwardGroup &g : c.groups) decode_batch = decode_batch && g.items.size() == 1;
    ops_->set_decode_batch(decode_batch);
    if (rope_depends_on_positions(model_.hparams().rope)) {
      int64_t max_pos = 0;
      for (int64_t t = 0; t < p.T; ++t) max_pos = std::max<int64_t>(max_pos, c.positions[t]);
      set_rope_freqs(max_pos);
    }
    stage(c, p);
    ops_->get_rows(x_.as<float>(), emb_, ids_.as<int32_t>(), p.T, p.d);
    for (int32_t l = 0; l < p.nl; ++l) run_layer(c, kv, p, l);
    run_lm_head(c, p);
    download(c, p, out);
    for (size_t gi = 0; gi < c.groups.size(); ++gi) record_channels(c, p, gi);
  }

 private:
  using Runs = std::vector<std::pair<int64_t, int64_t>>;
  // Where one (group, layer) view's block table and H2O accumulators start in the chunk's staged buffers.
  struct ViewRef { int64_t table, acc; int32_t n_slots; KvDtype dtype; };

  // Everything a chunk's steps share, decided on the host before anything runs on the device.
  struct ChunkPlan {
    int64_t T, d, hd, nh, nkv, ff, V, qd, kvd;
    int32_t nl;
    float scale;
    int64_t R, LR;              // rows that get logits; rows of logits_ (see plan_chunk)
    std::vector<int64_t> wrows; // window query rows, ascending
    int64_t W;
    Runs wruns;
    std::vector<ViewRef> refs;  // [group][layer]
    int64_t acc_total = 0;
    bool rows_mode = false;     // a decode batch: attention for all sequences in one call per layer
    std::vector<int32_t> max_vis;
    const ViewRef &ref(size_t group, int32_t l) const { return refs[group * static_cast<size_t>(nl) + static_cast<size_t>(l)]; }
  };

  static size_t f32(int64_t n) { return static_cast<size_t>(n) * 4; }

  ChunkPlan plan_chunk(const ForwardChunk &c, KvCache &kv) {
    const HParams &hp = model_.hparams();
    ChunkPlan p;
    p.T = c.T; p.d = hp.n_embd; p.hd = hp.head_dim; p.nh = hp.n_head; p.nkv = hp.n_head_kv; p.ff = hp.n_ff;
    p.V = hp.n_vocab; p.qd = p.nh * p.hd; p.kvd = p.nkv * p.hd; p.nl = hp.n_layer;
    p.scale = 1.0f / std::sqrt(static_cast<float>(p.hd));

    // Rows that get logits. Entropy scoring needs every position's distribution, but only its entropy is kept: the
    // LM head then runs kLmRows rows at a time into a buffer (a chunk with entropy on is at most kEntropyChunk = 64
    // tokens, whose SmolLM2 logits would take 12.6 MB; 32 rows take 6 MB, of Qwen2.5's 152K vocabulary 19 MB), and
    // the rows the caller asked for are copied out as they pass. The quantised LM head is unpacked once per kLmRows
    // rows: at 8 rows unpacking it was a tenth of prefill with a policy on (SmolLM2's Q8_0 head), and on AVX-512 fewer
    // than 16 rows miss the panel kernel; at 32 prefill with InfoKV's entropy channel ran 1.15-1.25x faster
    // (performance.md).
    p.R = static_cast<int64_t>(c.logit_rows.size());
    p.LR = c.entropy ? std::min<int64_t>(p.T, kLmRows) : p.R;

    // Window query rows: the last window_rows items of each group (the same rows in every layer).
    if (c.window_rows > 0)
      for (const ForwardGroup &g : c.groups) {
        const size_t keep = std::min(g.items.size(), static_cast<size_t>(c.window_rows));
        p.wrows.insert(p.wrows.end(), g.items.end() - static_cast<int64_t>(keep), g.items.end());
      }
    std::sort(p.wrows.begin(), p.wrows.end());
    p.W = static_cast<int64_t>(p.wrows.size());
    p.wruns = runs_of(p.wrows);

    // Block tables of every (group, layer), and the H2O accumulators' offsets, staged once per chunk.
    table_host_.clear();
    for (const ForwardGroup &g : c.groups)
      for (int32_t l = 0; l < p.nl; ++l) {
        const PagedKv v = kv.view(g.seq, l);
        const int32_t nb = (v.n_slots + v.block_size - 1) / v.block_size;
        p.refs.push_back({static_cast<int64_t>(table_host_.size()), p.acc_total, v.n_slots, v.dtype});
        table_host_.insert(table_host_.end(), v.block_table, v.block_table + nb);
        if (c.attention_acc) p.acc_total += v.n_slots;
      }
    plan_rows_mode(c, kv, p);
    return p;
  }

  // A decode batch (one token for each of several sequences, no H2O sums) runs attention for all sequences in one
  // call per layer: per-row block-table offsets, visible counts and destination slots, staged once per chunk as
  // [layer][row] (offsets, counts) and [layer][row][2] (block, slot).
  void plan_rows_mode(const ForwardChunk &c, KvCache &kv, ChunkPlan &p) {
    p.rows_mode = c.groups.size() > 1 && !c.attention_acc;
    for (const ForwardGroup &g : c.groups) p.rows_mode = p.rows_mode && g.items.size() == 1;
    // One call per layer reads every row with one geometry: each layer's dtype the same in every sequence.
    for (size_t gi = 1; gi < c.groups.size() && p.rows_mode; ++gi)
      for (int32_t l = 0; l < p.nl; ++l) p.rows_mode = p.rows_mode && p.ref(gi, l).dtype == p.ref(0, l).dtype;
    if (!p.rows_mode) return;
    const int64_t nl = p.nl, T = p.T;
    rows_host_.assign(static_cast<size_t>(nl * T * 4), 0);
    p.max_vis.assign(static_cast<size_t>(nl), 0);
    for (size_t gi = 0; gi < c.groups.size(); ++gi) {
      const int64_t t = c.groups[gi].items[0];
      for (int32_t l = 0; l < nl; ++l) {
        const ViewRef &r = p.ref(gi, l);
        const int32_t bs = kv.slots_per_block(r.dtype);
        const int32_t slot = r.n_slots - 1;
        rows_host_[static_cast<size_t>(l * T + t)] = static_cast<int32_t>(r.table);
        rows_host_[static_cast<size_t>((nl + l) * T + t)] = r.n_slots;
        rows_host_[static_cast<size_t>(2 * nl * T + 2 * (l * T + t))] = table_host_[static_cast<size_t>(r.table + slot / bs)];
        rows_host_[static_cast<size_t>(2 * nl * T + 2 * (l * T + t) + 1)] = slot % bs;
        p.max_vis[static_cast<size_t>(l)] = std::max(p.max_vis[static_cast<size_t>(l)], r.n_slots);
      }
    }
  }

  // Sizes the chunk's device buffers and uploads its inputs and block tables.
  void stage(const ForwardChunk &c, const ChunkPlan &p) {
    DeviceOps &o = *ops_;
    const int64_t T = p.T, d = p.d, nl = p.nl;
    if (p.rows_mode) rows_.ensure(o, rows_host_.size() * 4);
    x_.ensure(o, f32(T * d)); xn_.ensure(o, f32(T * d)); o_.ensure(o, f32(T * d));
    q_.ensure(o, f32(T * p.qd)); att_.ensure(o, f32(T * p.qd));
    k_.ensure(o, f32(T * p.kvd)); v_.ensure(o, f32(T * p.kvd));
    g_.ensure(o, f32(T * p.ff)); u_.ensure(o, f32(T * p.ff));
    ids_.ensure(o, f32(T)); pos_.ensure(o, f32(T));
    xr_.ensure(o, f32(p.R * d)); logits_.ensure(o, f32(p.LR * p.V));
    if (c.entropy && p.R > 0) lgout_.ensure(o, f32(p.R * p.V));
    table_.ensure(o, table_host_.size() * 4);
    if (c.attention_acc) acc_.ensure(o, f32(2 * p.acc_total));
    if (p.W > 0) wq_.ensure(o, f32(nl * p.W * p.qd));
    if (c.entropy) {
      hidden_.ensure(o, f32(nl * T * d));
      ent_.ensure(o, static_cast<size_t>(T) * 8);
      rep_.ensure(o, f32(nl * T));
    }

    o.upload(ids_.as<int32_t>(), c.tokens, f32(T));
    o.upload(pos_.as<int32_t>(), c.positions, f32(T));
    o.upload(table_.as<int32_t>(), table_host_.data(), table_host_.size() * 4);
    if (p.rows_mode) o.upload(rows_.as<int32_t>(), rows_host_.data(), rows_host_.size() * 4);
    if (c.attention_acc) o.zero(acc_.as<float>(), f32(2 * p.acc_total));
  }

  // One decoder layer over the chunk's residual stream x_: attention (appending the chunk's K/V to the paged pool)
  // and the feed-forward block; copies the window's query rows and, for entropy scoring, the layer's output.
  void run_layer(const ForwardChunk &c, KvCache &kv, const ChunkPlan &p, int32_t l) {
    DeviceOps &o = *ops_;
    const HParams &hp = model_.hparams();
    const int64_t T = p.T, d = p.d;
    float *x = x_.as<float>(), *xn = xn_.as<float>(), *ob = o_.as<float>(), *q = q_.as<float>(), *att = att_.as<float>();
    float *k = k_.as<float>(), *v = v_.as<float>(), *gb = g_.as<float>(), *ub = u_.as<float>();
    const int32_t *pos = pos_.as<int32_t>();
    const DevLayer &L = layers_[static_cast<size_t>(l)];
    o.rmsnorm(xn, x, L.attn_norm, T, d, hp.rms_eps);
    {
      float *const outs[3] = {q, k, v};
      const DevMatrix *const ws[3] = {&L.wq, &L.wk, &L.wv};
      o.matmul_parts(outs, xn, ws, 3, T);
    }
    if (L.bq != nullptr) o.add_bias(q, L.bq, T, p.qd);
    if (L.bk != nullptr) o.add_bias(k, L.bk, T, p.kvd);
    if (L.bv != nullptr) o.add_bias(v, L.bv, T, p.kvd);
    o.rope(q, pos, T, p.nh, p.hd, freq_.as<double>());
    o.rope(k, pos, T, p.nkv, p.hd, freq_.as<double>());
    shift_keys(c, p, l);
    attend(c, kv, p, l);
    int64_t wi = 0;
    for (const auto &run : p.wruns) {
      o.copy(wq_.as<float>() + (l * p.W + wi) * p.qd, q + run.first * p.qd, f32(run.second * p.qd));
      wi += run.second;
    }
    o.matmul(ob, att, L.wo, T);
    if (L.bo != nullptr) o.add_bias(ob, L.bo, T, d);
    o.add_inplace(x, ob, T * d);
    o.rmsnorm(xn, x, L.ffn_norm, T, d, hp.rms_eps);
    {
      float *const outs[2] = {gb, ub};
      const DevMatrix *const ws[2] = {&L.gate, &L.up};
      o.matmul_parts(outs, xn, ws, 2, T);
    }
    o.swiglu(gb, gb, ub, T * p.ff);
    o.matmul(ob, gb, L.down, T);
    o.add_inplace(x, ob, T * d);
    if (c.entropy) o.copy(hidden_.as<float>() + l * T * d, x, f32(T * d));
  }

  // Keys of a layer held less its K bias (kv_keys_less_bias) lose it before they are appended: all of the chunk's
  // when every sequence holds the layer in one dtype, else the rows of the sequences whose layer does.
  void shift_keys(const ForwardChunk &c, const ChunkPlan &p, int32_t l) {
    const DevLayer &L = layers_[static_cast<size_t>(l)];
    if (L.k_shift == nullptr) return;
    DeviceOps &o = *ops_;
    float *k = k_.as<float>();
    bool all = true, any = false;
    for (size_t gi = 0; gi < c.groups.size(); ++gi) {
      const bool less = kv_keys_less_bias(p.ref(gi, l).dtype);
      all = all && less;
      any = any || less;
    }
    if (all) {
      o.add_bias(k, L.k_shift, p.T, p.kvd);
    } else if (any) {
      for (size_t gi = 0; gi < c.groups.size(); ++gi)
        if (kv_keys_less_bias(p.ref(gi, l).dtype))
          for (const auto &run : runs_of(c.groups[gi].items)) o.add_bias(k + run.first * p.kvd, L.k_shift, run.second, p.kvd);
    }
  }

  // Appends layer l's K/V of the chunk to the paged pool and computes attention into att_.
  void attend(const ForwardChunk &c, KvCache &kv, const ChunkPlan &p, int32_t l) {
    DeviceOps &o = *ops_;
    const int64_t T = p.T, nl = p.nl, qd = p.qd, kvd = p.kvd;
    const int32_t nh = static_cast<int32_t>(p.nh);
    float *q = q_.as<float>(), *att = att_.as<float>(), *k = k_.as<float>(), *v = v_.as<float>();
    if (p.rows_mode) {
      PagedKv view = kv.view(c.groups[0].seq, l);  // geometry and pool; tables per row
      view.block_table = table_.as<int32_t>();
      const int32_t *rows = rows_.as<int32_t>();
      o.kv_append_rows(view, rows + 2 * nl * T + 2 * l * T, k, v, T);
      o.paged_attention_rows(att, q, T, nh, view, rows + l * T, rows + (nl + l) * T, p.max_vis[static_cast<size_t>(l)], p.scale);
      return;
    }
    for (size_t gi = 0; gi < c.groups.size(); ++gi) {
      const std::vector<int64_t> &idx = c.groups[gi].items;
      const ViewRef &r = p.ref(gi, l);
      PagedKv view = kv.view(c.groups[gi].seq, l);  // geometry and pool; the table replaced by the device copy
      view.block_table = table_.as<int32_t>() + r.table;
      float *acc = c.attention_acc ? acc_.as<float>() + r.acc : nullptr;
      float *cnt = c.attention_acc ? acc_.as<float>() + p.acc_total + r.acc : nullptr;
      int32_t slot = r.n_slots - static_cast<int32_t>(idx.size());
      // Contiguous items (a prefill, or one token per sequence) run as one call; scattered ones run by runs.
      for (const auto &run : runs_of(idx)) {
        const int64_t t = run.first, n = run.second;
        o.kv_append(view, slot, k + t * kvd, v + t * kvd, n);
        o.paged_attention(att + t * qd, q + t * qd, n, nh, view, slot + 1, p.scale, acc, cnt);
        slot += static_cast<int32_t>(n);
      }
    }
  }

  // Final norm and LM head: the requested rows' logits (and, for entropy scoring, every row's entropy and the
  // representation change of every layer).
  void run_lm_head(const ForwardChunk &c, const ChunkPlan &p) {
    DeviceOps &o = *ops_;
    const HParams &hp = model_.hparams();
    const int64_t T = p.T, d = p.d, V = p.V, R = p.R, LR = p.LR;
    const std::vector<int64_t> &lm_rows = c.logit_rows;
    float *xn = xn_.as<float>();
    o.rmsnorm(xn, x_.as<float>(), out_norm_, T, d, hp.rms_eps);
    if (c.entropy) {
      for (int64_t t0 = 0, ri = 0; t0 < T; t0 += LR) {
        const int64_t n = std::min(LR, T - t0);
        o.matmul(logits_.as<float>(), xn + t0 * d, out_, n);
        o.topk_entropy_rows(ent_.as<double>() + t0, logits_.as<float>(), n, static_cast<int32_t>(V), c.entropy_top_k);
        for (; ri < R && lm_rows[static_cast<size_t>(ri)] < t0 + n; ++ri)
          o.copy(lgout_.as<float>() + ri * V, logits_.as<float>() + (lm_rows[static_cast<size_t>(ri)] - t0) * V, f32(V));
      }
      o.rep_change_rows(rep_.as<float>(), hidden_.as<float>(), p.nl, T, d);
    } else if (R > 0) {
      int64_t ri = 0;
      for (const auto &run : runs_of(lm_rows)) {
        o.copy(xr_.as<float>() + ri * d, xn + run.first * d, f32(run.second * d));
        ri += run.second;
      }
      o.matmul(logits_.as<float>(), xr_.as<float>(), out_, R);
    }
  }

  // Downloads, then the chunk's one synchronisation.
  void download(const ForwardChunk &c, const ChunkPlan &p, float *out) {
    DeviceOps &o = *ops_;
    const int64_t T = p.T, nl = p.nl;
    if (p.R > 0) o.download(out, (c.entropy ? lgout_ : logits_).as<float>(), f32(p.R * p.V));
    if (c.entropy) {
      ent_host_.resize(static_cast<size_t>(T));
      rep_host_.resize(static_cast<size_t>(nl * T));
      o.download(ent_host_.data(), ent_.as<double>(), static_cast<size_t>(T) * 8);
      o.download(rep_host_.data(), rep_.as<float>(), f32(nl * T));
    }
    if (c.attention_acc) {
      acc_host_.resize(static_cast<size_t>(2 * p.acc_total));
      o.download(acc_host_.data(), acc_.as<float>(), f32(2 * p.acc_total));
    }
    if (p.W > 0) {
      wq_host_.resize(static_cast<size_t>(nl * p.W * p.qd));
      o.download(wq_host_.data(), wq_.as<float>(), f32(nl * p.W * p.qd));
    }
    o.sync();
  }

  // Records group gi's observations on the host, in its StepObservations (applied when the step commits): the
  // attention sums of every slot, the window rows, and each new token's entropy and representation change.
  void record_channels(const ForwardChunk &c, const ChunkPlan &p, size_t gi) {
    const ForwardGroup &g = c.groups[gi];
    const int64_t n = static_cast<int64_t>(g.items.size());
    const int32_t nl = p.nl;
    StepObservations &step = *g.step;
    if (c.attention_acc) {
      step.attn_sum.resize(static_cast<size_t>(nl));
      step.attn_count.resize(static_cast<size_t>(nl));
      for (int32_t l = 0; l < nl; ++l) {
        const ViewRef &r = p.ref(gi, l);
        std::vector<float> &acc = step.attn_sum[static_cast<size_t>(l)], &cnt = step.attn_count[static_cast<size_t>(l)];
        acc.resize(static_cast<size_t>(r.n_slots), 0.0f);
        cnt.resize(static_cast<size_t>(r.n_slots), 0.0f);
        for (int32_t j = 0; j < r.n_slots; ++j) {
          acc[static_cast<size_t>(j)] += acc_host_[static_cast<size_t>(r.acc + j)];
          cnt[static_cast<size_t>(j)] += acc_host_[static_cast<size_t>(p.acc_total + r.acc + j)];
        }
      }
    }
    if (p.W > 0) record_window(c, p, g, step);
    if (c.entropy) {
      step.rep_change.resize(static_cast<size_t>(nl));
      // H of a token is the entropy of the distribution that predicted it (the previous position's logits).
      for (int64_t j = 0; j < n; ++j) {
        const int64_t t = g.items[static_cast<size_t>(j)];
        step.entropy.push_back(c.positions[t] == 0 ? 0.0f : *g.pending_entropy);
        *g.pending_entropy = static_cast<float>(ent_host_[static_cast<size_t>(t)]);
        for (int32_t l = 0; l < nl; ++l)
          step.rep_change[static_cast<size_t>(l)].push_back(rep_host_[static_cast<size_t>(l * p.T + t)]);
      }
    }
  }

  void record_window(const ForwardChunk &c, const ChunkPlan &p, const ForwardGroup &g, StepObservations &step) {
    const int64_t n = static_cast<int64_t>(g.items.size()), qd = p.qd;
    // Only the last window_rows rows can survive the commit's trim: older ones are not kept.
    const int64_t keep = std::min<int64_t>(n, c.window_rows);
    step.window_q.resize(static_cast<size_t>(p.nl));
    for (int32_t l = 0; l < p.nl; ++l) {
      std::vector<float> &wq = step.window_q[static_cast<size_t>(l)];
      for (int64_t j = n - keep; j < n; ++j) {
        const int64_t wi = std::lower_bound(p.wrows.begin(), p.wrows.end(), g.items[static_cast<size_t>(j)]) - p.wrows.begin();
        const float *row = wq_host_.data() + (l * p.W + wi) * qd;
        wq.insert(wq.end(), row, row + qd);
      }
      keep_last(wq, static_cast<size_t>(c.window_rows * qd));
    }
    for (int64_t j = n - keep; j < n; ++j) step.window_pos.push_back(c.positions[g.items[static_cast<size_t>(j)]]);
    keep_last(step.window_pos, static_cast<size_t>(c.window_rows));
  }

  // The rope kernel's inverse frequencies for a forward pass whose longest position is max_pos (they depend on it
  // only with dynamic NTK scaling, as in transformers: keys already cached keep the angles they were stored with).
  void set_rope_freqs(int64_t max_pos) {
    const HParams &hp = model_.hparams();
    std::vector<double> f = rope_inv_freq(hp.rope_theta, hp.head_dim, hp.rope, max_pos);
    if (f == freq_host_) return;
    freq_.ensure(*ops_, f.size() * sizeof(double));
    ops_->upload(freq_.as<double>(), f.data(), f.size() * sizeof(double));
    freq_host_ = std::move(f);
  }

  const Model &model_;
  std::unique_ptr<DeviceOps> ops_;
  std::vector<DevLayer> layers_;
  std::deque<std::vector<float>> k_shift_host_;  // DevLayer::k_shift on the host (a deque: elements never move)
  DevMatrix emb_, out_;
  const float *out_norm_ = nullptr;
  DevBuf x_, xn_, o_, q_, att_, k_, v_, g_, u_, ids_, pos_, xr_, logits_, lgout_, table_, rows_, acc_, wq_, hidden_, ent_, rep_;
  std::vector<int32_t> table_host_, rows_host_;
  std::vector<float> acc_host_, wq_host_, rep_host_;
  std::vector<double> ent_host_;
  DevBuf freq_;
  std::vector<double> freq_host_;
};

}  // namespace

std::unique_ptr<KvStore> make_ops_kv_store(DeviceOps &ops, const PagedKv &geometry, int64_t n_blocks) {
  return std::make_unique<OpsKvStore>(ops, geometry, n_blocks);
}

std::unique_ptr<DeviceForward> make_ops_forward(const Model &model, std::unique_ptr<DeviceOps> ops) {
  return std::make_unique<OpsForward>(model, std::move(ops));
}

}  // namespace infokv
