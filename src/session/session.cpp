#include "session/session.hpp"

#include "backend/device.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "util/error.hpp"

namespace infokv {

namespace {

int64_t default_pool_blocks(const HParams &hp, const SessionOptions &o) {
  const int64_t block_bytes = int64_t{2} * hp.n_head_kv * o.block_size * hp.head_dim * kv_dtype_size(o.kv_dtype);
  if (o.kv_pool_blocks > 0) return o.kv_pool_blocks;
  if (o.kv_pool_bytes > 0) return std::max<int64_t>(1, o.kv_pool_bytes / block_bytes);
  const int64_t tokens = int64_t{4} * hp.n_ctx_train;
  int64_t blocks = (tokens + o.block_size - 1) / o.block_size * hp.n_layer;
  const int64_t cap = (int64_t{1} << 30) / block_bytes;
  return std::max<int64_t>(hp.n_layer, std::min(blocks, cap));
}

}  // namespace

Session::Session(std::shared_ptr<const Model> model, const SessionOptions &opts) : model_(std::move(model)), opts_(opts) {
  if (!model_) fail(Status::invalid_argument, "session needs a model");
  if (opts_.n_threads < 0 || opts_.n_threads > 1024) fail(Status::invalid_argument, "n_threads must be in [0, 1024]");
  if (opts_.block_size < 1 || opts_.block_size > 1024) fail(Status::invalid_argument, "block_size must be in [1, 1024]");
  if (opts_.ubatch < 1) opts_.ubatch = 256;
  if (opts_.kv_pool_blocks < 0 || opts_.kv_pool_bytes < 0) fail(Status::invalid_argument, "KV pool size must not be negative");
  opts_.compression.validate();
  const DeviceChoice dev = select_device(opts_.device);  // throws no_device / invalid_argument
  if (dev.kind == DeviceKind::cuda && opts_.compression.enabled())
    fail(Status::unsupported, "device '" + opts_.device + "': KV compression is not implemented on CUDA yet; use policy none "
                              "or device cpu");
  const HParams &hp = model_->hparams();
  pool_ = std::make_unique<ThreadPool>(opts_.n_threads > 0 ? opts_.n_threads : default_thread_count());
  KvConfig kc;
  kc.n_layer = hp.n_layer;
  kc.n_kv_heads = hp.n_head_kv;
  kc.head_dim = hp.head_dim;
  kc.n_q_dim = hp.n_head * hp.head_dim;
  kc.block_size = opts_.block_size;
  kc.dtype = opts_.kv_dtype;
  kc.n_blocks = default_pool_blocks(hp, opts_);
  kv_ = std::make_unique<KvCache>(kc);
  if (dev.kind == DeviceKind::cuda) device_ = make_device_forward(*model_, *kv_, dev);
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

int32_t Session::add_sequence() {
  while (kv_->has(next_id_) || next_id_ < 0) next_id_ = next_id_ < 0 ? 0 : next_id_ + 1;
  const int32_t id = next_id_++;
  kv_->add(id);
  seqs_[id] = SeqState{};
  return id;
}

int32_t Session::adopt_sequence(SeqCache &&cache, SeqState &&st) {
  while (kv_->has(next_id_) || next_id_ < 0) next_id_ = next_id_ < 0 ? 0 : next_id_ + 1;
  const int32_t id = next_id_++;
  kv_->adopt(id, std::move(cache));
  seqs_[id] = std::move(st);
  return id;
}

void Session::remove_sequence(int32_t seq) {
  kv_->remove(seq);
  seqs_.erase(seq);
}

int32_t Session::fork_sequence(int32_t src) {
  const SeqState &s = state(src);
  if (device_) fail(Status::unsupported, "fork is not implemented on " + device_->describe() + " yet");
  while (kv_->has(next_id_) || next_id_ < 0) next_id_ = next_id_ < 0 ? 0 : next_id_ + 1;
  const int32_t id = next_id_++;
  kv_->fork(src, id);
  seqs_[id] = s;
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
  return i;
}

const std::vector<int32_t> &Session::tokens(int32_t seq) const { return state(seq).tokens; }

const std::vector<float> &Session::logits(int32_t seq) const {
  const SeqState &s = state(seq);
  if (!s.has_logits) fail(Status::bad_state, "sequence " + std::to_string(seq) + " has no logits yet: decode first");
  return s.logits;
}

int32_t Session::window_capacity() const { return std::max(32, opts_.compression.window); }

void Session::decode(const std::vector<BatchToken> &batch) {
  if (batch.empty()) fail(Status::invalid_argument, "empty batch");
  const int32_t n_vocab = model_->hparams().n_vocab;
  std::map<int32_t, int32_t> counts;
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
  {
    std::map<int32_t, int64_t> next;
    for (const auto &kv : counts) next[kv.first] = kv_->seq(kv.first).length;
    for (size_t i = 0; i < batch.size(); ++i) {
      int64_t p = next[batch[i].seq]++;
      if (p >= (int64_t{1} << 31) - 1) fail(Status::out_of_range, "sequence too long");
      positions[i] = static_cast<int32_t>(p);
    }
  }
  std::vector<int32_t> ids, cnts;
  for (const auto &kv : counts) {
    ids.push_back(kv.first);
    cnts.push_back(kv.second);
  }
  int64_t need = kv_->blocks_needed(ids, cnts);
  if (need > kv_->free_blocks() && opts_.compression.enabled()) {
    for (int32_t id : kv_->sequence_ids()) {
      const SeqCache &c = kv_->seq(id);
      int32_t kept = 0;
      for (const LayerSlots &L : c.layers) kept = std::max(kept, L.n());
      if (kept > budget_for(id)) compress(id);
    }
    need = kv_->blocks_needed(ids, cnts);
  }
  if (need > kv_->free_blocks())
    fail(Status::kv_full, "KV cache full: this step needs " + std::to_string(need) + " blocks, " +
                              std::to_string(kv_->free_blocks()) + " are free (pool of " +
                              std::to_string(kv_->stats().blocks_total) + ")");

  // Rows whose logits are computed: flagged ones and the last of each sequence.
  std::map<int32_t, size_t> last_item;
  for (size_t i = 0; i < batch.size(); ++i) last_item[batch[i].seq] = i;
  std::vector<size_t> logit_rows;
  for (size_t i = 0; i < batch.size(); ++i)
    if (batch[i].logits || last_item[batch[i].seq] == i) logit_rows.push_back(i);

  // Snapshot of what a failure must restore.
  struct Saved { std::vector<int32_t> n; int64_t length; std::vector<int32_t> wpos; std::vector<std::vector<float>> wq; };
  std::map<int32_t, Saved> saved;
  std::map<int32_t, SeqState> staged;
  for (int32_t id : ids) {
    const SeqCache &c = kv_->seq(id);
    Saved s;
    for (const LayerSlots &L : c.layers) s.n.push_back(L.n());
    s.length = c.length;
    s.wpos = c.window_pos;
    s.wq = c.window_q;
    saved.emplace(id, std::move(s));
    staged.emplace(id, state(id));
  }
  std::vector<float> out_logits;
  try {
    forward(batch, positions, out_logits, logit_rows, staged);
  } catch (...) {
    for (auto &kv : saved) {
      kv_->shrink_to(kv.first, kv.second.n, kv.second.length);
      SeqCache &c = kv_->seq_mut(kv.first);
      c.window_pos = std::move(kv.second.wpos);
      c.window_q = std::move(kv.second.wq);
    }
    throw;
  }
  // Commit.
  batch_logits_.clear();
  const size_t V = static_cast<size_t>(n_vocab);
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
  if (opts_.compression.enabled()) {
    std::vector<int32_t> prefill, decoded;
    for (int32_t id : ids) {
      SeqState &s = seqs_[id];
      s.since_compress += counts[id];
      if (!s.prefilled) {
        s.prefilled = true;
        if (opts_.compression.compress_after_prefill) prefill.push_back(id);
      } else if (s.since_compress >= opts_.compression.interval) {
        decoded.push_back(id);
      }
    }
    // compress() tells a prefill compression (pooling kernel 5) from a decoding one (7) by its count.
    maybe_compress_after(prefill);
    maybe_compress_after(decoded);
  } else {
    for (int32_t id : ids) seqs_[id].prefilled = true;
  }
}

void Session::forward(const std::vector<BatchToken> &items, const std::vector<int32_t> &positions,
                      std::vector<float> &out_logits, const std::vector<size_t> &logit_rows,
                      std::map<int32_t, SeqState> &staged) {
  if (device_) {
    forward_device(items, positions, out_logits, logit_rows);
    return;
  }
  const HParams &hp = model_->hparams();
  const int64_t d = hp.n_embd, hd = hp.head_dim, nh = hp.n_head, nkv = hp.n_head_kv, ff = hp.n_ff;
  const int64_t qd = nh * hd, kvd = nkv * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const CompressionConfig &cc = opts_.compression;
  const bool want_window = cc.needs_window_queries();
  const bool want_acc = cc.needs_accumulated_attention();
  const bool want_entropy = cc.needs_entropy();
  const size_t V = static_cast<size_t>(hp.n_vocab);
  out_logits.assign(logit_rows.size() * V, 0.0f);
  std::vector<char> row_wanted(items.size(), 0);
  std::vector<size_t> row_slot(items.size(), 0);
  for (size_t r = 0; r < logit_rows.size(); ++r) {
    row_wanted[logit_rows[r]] = 1;
    row_slot[logit_rows[r]] = r;
  }
  const int32_t wcap = window_capacity();

  const size_t ub = static_cast<size_t>(opts_.ubatch);
  for (size_t c0 = 0; c0 < items.size(); c0 += ub) {
    const size_t c1 = std::min(items.size(), c0 + ub);
    const int64_t T = static_cast<int64_t>(c1 - c0);
    // Group the chunk's items by sequence (ascending positions within each).
    std::map<int32_t, std::vector<int64_t>> groups;
    for (size_t i = c0; i < c1; ++i) groups[items[i].seq].push_back(static_cast<int64_t>(i - c0));
    for (auto &g : groups) {
      std::vector<int32_t> pos;
      for (int64_t t : g.second) pos.push_back(positions[c0 + static_cast<size_t>(t)]);
      kv_->append_slots(g.first, pos.data(), static_cast<int32_t>(pos.size()));
    }
    std::vector<float> x(static_cast<size_t>(T * d)), xn(x.size()), q(static_cast<size_t>(T * qd)),
        k(static_cast<size_t>(T * kvd)), v(k.size()), att(q.size()), o(x.size()), g1(static_cast<size_t>(T * ff)),
        u1(g1.size());
    std::vector<std::vector<float>> hidden;  // residual after each layer, for the representation-change channel
    if (want_entropy) hidden.resize(static_cast<size_t>(hp.n_layer));
    const Weight &emb = model_->token_embd();
    for (int64_t t = 0; t < T; ++t)
      if (!cpu::get_row(x.data() + t * d, emb.data, emb.type, items[c0 + static_cast<size_t>(t)].token, d))
        fail(Status::unsupported, "unsupported embedding type");
    std::vector<int32_t> pos_chunk(positions.begin() + static_cast<int64_t>(c0), positions.begin() + static_cast<int64_t>(c1));
    std::vector<float> qg, kg, vg, og;
    for (int32_t l = 0; l < hp.n_layer; ++l) {
      const LayerWeights &L = model_->layer(l);
      cpu::rmsnorm(xn.data(), x.data(), L.attn_norm.data(), T, d, hp.rms_eps);
      cpu::matmul(q.data(), xn.data(), L.wq.data, L.wq.type, T, qd, d, pool_.get());
      cpu::matmul(k.data(), xn.data(), L.wk.data, L.wk.type, T, kvd, d, pool_.get());
      cpu::matmul(v.data(), xn.data(), L.wv.data, L.wv.type, T, kvd, d, pool_.get());
      cpu::rope(q.data(), pos_chunk.data(), T, nh, hd, hp.rope_theta);
      cpu::rope(k.data(), pos_chunk.data(), T, nkv, hd, hp.rope_theta);
      for (auto &grp : groups) {
        const auto &idx = grp.second;
        const int64_t n = static_cast<int64_t>(idx.size());
        qg.resize(static_cast<size_t>(n * qd));
        kg.resize(static_cast<size_t>(n * kvd));
        vg.resize(kg.size());
        og.resize(qg.size());
        for (int64_t j = 0; j < n; ++j) {
          std::copy_n(q.begin() + idx[static_cast<size_t>(j)] * qd, qd, qg.begin() + j * qd);
          std::copy_n(k.begin() + idx[static_cast<size_t>(j)] * kvd, kvd, kg.begin() + j * kvd);
          std::copy_n(v.begin() + idx[static_cast<size_t>(j)] * kvd, kvd, vg.begin() + j * kvd);
        }
        cpu::PagedKv view = kv_->view(grp.first, l);
        const int32_t first = view.n_slots - static_cast<int32_t>(n);
        cpu::kv_append(view, first, kg.data(), vg.data(), n);
        LayerSlots &LS = kv_->seq_mut(grp.first).layers[static_cast<size_t>(l)];
        cpu::paged_attention(og.data(), qg.data(), n, static_cast<int32_t>(nh), view, first + 1, scale,
                             want_acc ? LS.imp[kImpAttnAcc].data() : nullptr,
                             want_acc ? LS.imp[kImpAttnCount].data() : nullptr, pool_.get());
        for (int64_t j = 0; j < n; ++j) std::copy_n(og.begin() + j * qd, qd, att.begin() + idx[static_cast<size_t>(j)] * qd);
        if (want_window) {
          SeqCache &sc = kv_->seq_mut(grp.first);
          std::vector<float> &wq = sc.window_q[static_cast<size_t>(l)];
          const int64_t keep_rows = std::min<int64_t>(n, wcap);
          wq.insert(wq.end(), qg.end() - keep_rows * qd, qg.end());
          const int64_t rows = static_cast<int64_t>(wq.size()) / qd;
          if (rows > wcap) wq.erase(wq.begin(), wq.begin() + (rows - wcap) * qd);
          if (l == 0) {
            for (int64_t j = n - keep_rows; j < n; ++j) sc.window_pos.push_back(pos_chunk[static_cast<size_t>(idx[static_cast<size_t>(j)])]);
            if (static_cast<int32_t>(sc.window_pos.size()) > wcap)
              sc.window_pos.erase(sc.window_pos.begin(), sc.window_pos.end() - wcap);
          }
        }
      }
      cpu::matmul(o.data(), att.data(), L.wo.data, L.wo.type, T, d, qd, pool_.get());
      cpu::add_inplace(x.data(), o.data(), T * d);
      cpu::rmsnorm(xn.data(), x.data(), L.ffn_norm.data(), T, d, hp.rms_eps);
      cpu::matmul(g1.data(), xn.data(), L.w_gate.data, L.w_gate.type, T, ff, d, pool_.get());
      cpu::matmul(u1.data(), xn.data(), L.w_up.data, L.w_up.type, T, ff, d, pool_.get());
      cpu::swiglu(g1.data(), g1.data(), u1.data(), T * ff);
      cpu::matmul(o.data(), g1.data(), L.w_down.data, L.w_down.type, T, d, ff, pool_.get());
      cpu::add_inplace(x.data(), o.data(), T * d);
      if (want_entropy) hidden[static_cast<size_t>(l)] = x;
    }
    cpu::rmsnorm(xn.data(), x.data(), model_->output_norm().data(), T, d, hp.rms_eps);
    // LM head for the rows that need logits (every row when entropy is scored).
    std::vector<int64_t> rows;
    for (int64_t t = 0; t < T; ++t)
      if (want_entropy || row_wanted[c0 + static_cast<size_t>(t)]) rows.push_back(t);
    std::vector<float> xr(rows.size() * static_cast<size_t>(d)), lg(rows.size() * V);
    for (size_t r = 0; r < rows.size(); ++r) std::copy_n(xn.begin() + rows[r] * d, d, xr.begin() + static_cast<int64_t>(r) * d);
    const Weight &out = model_->output();
    cpu::matmul(lg.data(), xr.data(), out.data, out.type, static_cast<int64_t>(rows.size()), static_cast<int64_t>(V), d, pool_.get());
    for (size_t r = 0; r < rows.size(); ++r) {
      const size_t i = c0 + static_cast<size_t>(rows[r]);
      if (row_wanted[i]) std::copy_n(lg.begin() + static_cast<int64_t>(r * V), V, out_logits.begin() + static_cast<int64_t>(row_slot[i] * V));
    }
    if (want_entropy) {
      // H of a token is the entropy of the distribution that predicted it (the previous position's logits).
      for (auto &grp : groups) {
        SeqState &st = staged.at(grp.first);
        SeqCache &sc = kv_->seq_mut(grp.first);
        const auto &idx = grp.second;
        for (size_t j = 0; j < idx.size(); ++j) {
          const int64_t t = idx[j];
          const float h = positions[c0 + static_cast<size_t>(t)] == 0 ? 0.0f : st.pending_entropy;
          const size_t r = static_cast<size_t>(t);  // rows == every t when entropy is scored
          st.pending_entropy = static_cast<float>(cpu::topk_entropy(lg.data() + r * V, static_cast<int32_t>(V), cc.entropy_top_k));
          const auto &hl = hidden[static_cast<size_t>(hp.n_layer - 1)];
          for (int32_t l = 0; l < hp.n_layer; ++l) {
            LayerSlots &LS = sc.layers[static_cast<size_t>(l)];
            const int32_t slot = LS.n() - static_cast<int32_t>(idx.size()) + static_cast<int32_t>(j);
            LS.imp[kImpEntropy][static_cast<size_t>(slot)] = h;
            const float *a = hidden[static_cast<size_t>(l)].data() + t * d;
            const float *b = hl.data() + t * d;
            double ab = 0, aa = 0, bb = 0;
            for (int64_t e = 0; e < d; ++e) { ab += double(a[e]) * b[e]; aa += double(a[e]) * a[e]; bb += double(b[e]) * b[e]; }
            const double cosv = (aa > 0 && bb > 0) ? ab / std::sqrt(aa * bb) : 1.0;
            LS.imp[kImpRepChange][static_cast<size_t>(slot)] = static_cast<float>(1.0 - cosv);
          }
        }
      }
    }
  }
}

void Session::set_compression(const CompressionConfig &c) {
  c.validate();
  if (device_ && c.enabled()) fail(Status::unsupported, "KV compression is not implemented on " + device_->describe() + " yet");
  opts_.compression = c;
}

void Session::protect(int32_t seq, const ProtectedSpan &span) {
  SeqState &s = state(seq);
  if (span.begin < 0 || span.end < span.begin) fail(Status::invalid_argument, "protected span must satisfy 0 <= begin <= end");
  s.spans.push_back(span);
}

const std::vector<ProtectedSpan> &Session::protected_spans(int32_t seq) const { return state(seq).spans; }

int64_t Session::compressions(int32_t seq) const { return state(seq).n_compressions; }

void Session::maybe_compress_after(const std::vector<int32_t> &seqs) {
  for (int32_t id : seqs) {
    const SeqCache &c = kv_->seq(id);
    int32_t kept = 0;
    for (const LayerSlots &L : c.layers) kept = std::max(kept, L.n());
    if (kept > budget_for(id)) compress(id);
    state(id).since_compress = 0;
  }
}

}  // namespace infokv
