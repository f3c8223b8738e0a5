// A sequence's layer chunks: the KV cache's kept slots (positions, K/V, slot channels) and each layer's window
// query rows, checked and staged; and a staged layer committed to the cache in its dtype (snapshot/read_internal.hpp).
#include <algorithm>
#include <cstring>

#include "snapshot/convert.hpp"
#include "snapshot/read_internal.hpp"

namespace infokv {
namespace snapshot {
namespace detail {

namespace {

// The dtype of a layer chunk's K/V: its own (v4) or the header's.
KvDtype layer_dtype(const fb::Layer *L, const Summary &sum, const std::string &lw) {
  const auto raw = static_cast<int32_t>(L->kv_dtype());
  if (raw == 0) return sum.kv_dtype;
  if (sum.min_reader_version < kLayerDtypeVersion) bad(lw + ": a layer dtype in a file for readers before version 4");
  if (!kv_dtype_valid(raw)) bad(lw + ": unknown layer KV dtype " + std::to_string(raw));
  const auto dt = static_cast<KvDtype>(raw);
  if (!kv_dtype_fits(dt, sum.head_dim)) bad(lw + ": layer KV dtype does not fit the head size");
  return dt;
}

// Checks one layer chunk of sequence `si` against its sequence (kept counts, window rows) and the layout; returns
// its number of slot channels.
int check_layer_chunk(const fb::Layer *L, int32_t si, int32_t layer, int32_t first, int32_t &last_pos, const SequenceSummary &ss,
                      size_t n_wpos, const Summary &sum, const RowLayout &lay, KvDtype dt, const std::string &lw) {
  const int64_t len = ss.length, row = kv_bytes(dt, sum.head_dim), qd = lay.qd, es = lay.es;
  const int32_t kept = ss.kept_per_layer[static_cast<size_t>(layer)];
  if (L->seq_index() != si || L->layer() != layer || L->first_slot() != first) bad(lw + ": out of order");
  const int32_t n = L->n_slots();
  if (n < 0 || n > kept - first || (n == 0 && kept != 0)) bad(lw + ": slot count does not add up to the kept count");
  if (vsize(L->pos()) != static_cast<size_t>(n)) bad(lw + ": positions size");
  const size_t kv_size = static_cast<size_t>(n) * static_cast<size_t>(sum.n_kv_heads) * static_cast<size_t>(row);
  if (vsize(L->k()) != kv_size || vsize(L->v()) != kv_size) bad(lw + ": K/V size does not match the layout");
  if ((L->imp_mask() & ~((1u << kSlotChannels) - 1)) != 0) bad(lw + ": unknown slot channel");
  int n_ch = 0;
  for (int ch = 0; ch < kSlotChannels; ++ch) n_ch += (L->imp_mask() >> ch) & 1;
  if (vsize(L->imp()) != static_cast<size_t>(n_ch) * static_cast<size_t>(n)) bad(lw + ": slot channel size");
  // Window rows come as f32 (v1) or, in a v2 file with a 16-bit KV dtype, in that dtype; never both.
  const size_t wq_size = first == 0 ? n_wpos * static_cast<size_t>(qd) : 0;
  const bool wq_kv = vsize(L->window_q_kv()) != 0;
  if (wq_kv && (sum.min_reader_version < kWindowKvVersion || sum.kv_dtype == KvDtype::f32))
    bad(lw + ": 16-bit window queries in a v1 file or an f32 cache");
  if (wq_kv ? vsize(L->window_q()) != 0 || vsize(L->window_q_kv()) != wq_size * static_cast<size_t>(es)
            : vsize(L->window_q()) != wq_size)
    bad(lw + ": window query size");
  check_hash(L->pos(), L->pos_xxh3(), lw + " positions");
  check_hash(L->k(), L->k_xxh3(), lw + " K");
  check_hash(L->v(), L->v_xxh3(), lw + " V");
  check_hash(L->imp(), L->imp_xxh3(), lw + " slot channels");
  check_hash(L->window_q(), L->window_q_xxh3(), lw + " window queries");
  if (wq_kv) check_hash(L->window_q_kv(), L->window_q_kv_xxh3(), lw + " window queries");  // v1: absent
  // Non-finite K/V, queries or slot channel values would turn every later logit into NaN (token 0 forever).
  if (!kv_rows_finite(L->k(), dt) || !kv_rows_finite(L->v(), dt)) bad(lw + ": K/V values are not all finite");
  if (!all_finite(L->imp()) || !all_finite(L->window_q()) || !kv_rows_finite(L->window_q_kv(), kv_window_dtype(sum.kv_dtype)))
    bad(lw + ": slot channel or window query values are not all finite");
  for (int32_t j = 0; j < n; ++j) {
    const int32_t p = L->pos()->Get(static_cast<flatbuffers::uoffset_t>(j));
    if (p <= last_pos || p >= len) bad(lw + ": positions not ascending within the length");
    last_pos = p;
  }
  return n_ch;
}

// Appends a checked layer chunk's slots (K/V transposed to [slot][kv head][head_dim], slot channels, and the
// layer's window query rows with its first chunk) to the staged layer.
void stage_layer_chunk(const fb::Layer *L, int32_t first, size_t n_wpos, const Summary &sum, const RowLayout &lay, KvDtype dt,
                       StagedLayer &SL) {
  const int32_t n = L->n_slots();
  const int64_t row = kv_bytes(dt, sum.head_dim);
  SL.dtype = dt;
  const size_t wq_size = first == 0 ? n_wpos * static_cast<size_t>(lay.qd) : 0;
  const bool wq_kv = vsize(L->window_q_kv()) != 0;
  SL.pos.insert(SL.pos.end(), L->pos()->begin(), L->pos()->end());
  const size_t nh = static_cast<size_t>(sum.n_kv_heads), r = static_cast<size_t>(row);
  SL.k.resize(static_cast<size_t>(first + n) * nh * r);
  SL.v.resize(SL.k.size());
  for (size_t hh = 0; hh < nh; ++hh)
    for (int32_t j = 0; j < n; ++j) {
      const size_t src = (hh * static_cast<size_t>(n) + static_cast<size_t>(j)) * r;
      const size_t dst = ((static_cast<size_t>(first + j)) * nh + hh) * r;
      std::memcpy(SL.k.data() + dst, L->k()->data() + src, r);
      std::memcpy(SL.v.data() + dst, L->v()->data() + src, r);
    }
  int k = 0;
  for (int ch = 0; ch < kSlotChannels; ++ch) {
    auto &dst = SL.channels[static_cast<size_t>(ch)];
    if ((L->imp_mask() >> ch) & 1) {
      const float *p = L->imp()->data() + static_cast<size_t>(k) * static_cast<size_t>(n);
      dst.insert(dst.end(), p, p + n);
      ++k;
    } else {
      dst.resize(static_cast<size_t>(first + n), 0.0f);
    }
  }
  if (first == 0 && L->window_q() != nullptr) SL.window_q.assign(L->window_q()->begin(), L->window_q()->end());
  if (first == 0 && wq_kv) {
    SL.window_q.resize(wq_size);
    convert_rows(reinterpret_cast<uint8_t *>(SL.window_q.data()), KvDtype::f32, L->window_q_kv()->data(), kv_window_dtype(sum.kv_dtype),
                 static_cast<int64_t>(wq_size));
  }
}

}  // namespace

void read_layer_chunks(ChunkReader &rd, int32_t si, int32_t layer_chunks, const SequenceSummary &ss, size_t n_wpos,
                       const Summary &sum, const RowLayout &lay, StagedSeq *sq, int &max_channels) {
  const std::string where = "sequence " + std::to_string(si);
  int32_t layer = 0, first = 0, last_pos = -1;
  KvDtype dt = sum.kv_dtype;  // the current layer's (every chunk of a layer the same)
  bool started = false;  // the current layer has had a chunk (a layer with nothing kept has one empty chunk)
  for (int32_t ci = 0; ci < layer_chunks; ++ci) {
    const fb::Chunk *c = rd.next();
    const std::string lw = where + " chunk " + std::to_string(ci);
    if (c == nullptr || c->kind() != fb::ChunkKind::LAYER || c->layer() == nullptr) bad(lw + ": layer chunk missing");
    const fb::Layer *L = c->layer();
    if (started && first == ss.kept_per_layer[static_cast<size_t>(layer)]) {  // previous layer complete: next one
      ++layer;
      first = 0;
      last_pos = -1;
      started = false;
      if (layer >= sum.n_layer) bad(lw + ": more layer chunks than layers");
    }
    const int32_t kept = ss.kept_per_layer[static_cast<size_t>(layer)];
    const KvDtype chunk_dt = layer_dtype(L, sum, lw);
    if (started && chunk_dt != dt) bad(lw + ": the chunks of a layer differ in KV dtype");
    dt = chunk_dt;
    max_channels = std::max(max_channels, check_layer_chunk(L, si, layer, first, last_pos, ss, n_wpos, sum, lay, dt, lw));
    if (sq != nullptr) stage_layer_chunk(L, first, n_wpos, sum, lay, dt, sq->layers[static_cast<size_t>(layer)]);
    first += L->n_slots();
    started = true;
    if (ci + 1 == layer_chunks && (layer != sum.n_layer - 1 || first != kept)) bad(where + ": layer chunks do not cover every layer");
  }
}


KvDtype restored_dtype(const KvCache &kv, KvDtype snapshot_dtype, KvDtype layer) {
  const bool own = layer != snapshot_dtype && kv.config().dtype == snapshot_dtype && kv.slots_per_block(layer) > 0;
  return own ? layer : kv.config().dtype;
}

LayerSlots commit_layer(KvCache &kv, StagedLayer &SL, KvDtype snapshot_dtype, const std::vector<float> &bk, std::vector<int32_t> &taken) {
  LayerSlots L;
  L.dtype = restored_dtype(kv, snapshot_dtype, SL.dtype);
  L.blocks = kv.import_rows(SL.k.data(), SL.v.data(), static_cast<int64_t>(SL.pos.size()), SL.dtype, L.dtype, bk, taken);
  L.pos = std::move(SL.pos);
  L.channels = std::move(SL.channels);
  return L;
}

}  // namespace detail
}  // namespace snapshot
}  // namespace infokv
