// A layer's K/V as rows: what snapshots save from the cache and restore into it (KvCache::layer_blocks,
// gather_rows, import_rows), converting between KV dtypes on the way in.
#include <cstring>

#include "kernels/ops.hpp"
#include "kv/kv_cache.hpp"
#include "util/error.hpp"

namespace infokv {

std::vector<uint8_t> KvCache::layer_blocks(int32_t id, int32_t layer) const {
  const LayerSlots &L = seq(id).layers.at(static_cast<size_t>(layer));
  std::vector<uint8_t> raw(L.blocks.size() * static_cast<size_t>(block_bytes_));
  store_->read_blocks(L.blocks, raw.data());
  return raw;
}

void KvCache::host_layer(int32_t id, int32_t layer, HostLayer &out) const {
  out.blocks = layer_blocks(id, layer);
  const LayerSlots &L = seq(id).layers.at(static_cast<size_t>(layer));
  const auto n_blocks = static_cast<int32_t>(L.blocks.size());
  out.table.resize(static_cast<size_t>(n_blocks));
  for (int32_t b = 0; b < n_blocks; ++b) out.table[static_cast<size_t>(b)] = b;
  out.view = geometry_of(L.dtype);
  out.view.pool = out.blocks.data();
  out.view.block_table = out.table.data();
  out.view.n_slots = L.n();
}

void KvCache::gather_rows(const std::vector<uint8_t> &blocks, KvDtype dtype, int which, int32_t first, int32_t n,
                          std::vector<uint8_t> &out) const {
  const KvConfig &c = cfg_;
  const int32_t bs = slots_per_block(dtype);
  if (bs < 1) fail(Status::invalid_argument, "gather_rows: no slot of this dtype fits a block");
  const auto row = static_cast<size_t>(kv_bytes(dtype, c.head_dim));
  out.resize(static_cast<size_t>(c.n_kv_heads) * static_cast<size_t>(n) * row);
  for (int32_t h = 0; h < c.n_kv_heads; ++h)
    for (int32_t j = 0; j < n; ++j) {
      const int32_t s = first + j;
      const uint8_t *src = blocks.data() + static_cast<int64_t>(s / bs) * block_bytes_ +
                           ((static_cast<int64_t>(which) * c.n_kv_heads + h) * bs + s % bs) * static_cast<int64_t>(row);
      std::memcpy(out.data() + (static_cast<size_t>(h) * static_cast<size_t>(n) + static_cast<size_t>(j)) * row, src, row);
    }
}

namespace {
// One head's row of K (which 0) or V (1) from dtype src to dst; keys stored less the layer's K bias on one side only
// get it (`bias`, this head's head_dim values; null without one) added back or taken away. krow: head_dim floats.
void convert_kv_row(uint8_t *dst, KvDtype dst_t, const uint8_t *from, KvDtype src_t, int64_t hd, int which, const float *bias,
                    float *krow) {
  const float bias_sign = static_cast<float>(kv_keys_less_bias(src_t)) - static_cast<float>(kv_keys_less_bias(dst_t));
  if (which == 0 && bias_sign != 0 && bias != nullptr) {
    cpu::convert(reinterpret_cast<uint8_t *>(krow), KvDtype::f32, from, src_t, hd);
    for (int64_t i = 0; i < hd; ++i) krow[i] += bias_sign * bias[i];
    cpu::convert(dst, dst_t, reinterpret_cast<const uint8_t *>(krow), KvDtype::f32, hd);
  } else {
    cpu::convert(dst, dst_t, from, src_t, hd);
  }
}
}  // namespace

std::vector<int32_t> KvCache::import_rows(const uint8_t *k, const uint8_t *v, int64_t n, KvDtype src, KvDtype dst,
                                          const std::vector<float> &key_bias, std::vector<int32_t> &taken) {
  const KvConfig &kc = cfg_;
  const int32_t bs = slots_per_block(dst);
  if (bs < 1) fail(Status::unsupported, std::string("KV dtype ") + kv_dtype_name(dst) + " cannot be held in this cache's blocks");
  const int64_t row = kv_bytes(dst, kc.head_dim), src_row = kv_bytes(src, kc.head_dim);
  const int64_t hd = kc.head_dim, nkv = kc.n_kv_heads;
  std::vector<int32_t> blocks = alloc_blocks((n + bs - 1) / bs);
  taken.insert(taken.end(), blocks.begin(), blocks.end());
  std::vector<float> krow(static_cast<size_t>(hd));
  // Built in host memory block by block, then written to the store (host or device) in one call.
  std::vector<uint8_t> raw(blocks.size() * static_cast<size_t>(block_bytes_), 0);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t h = 0; h < nkv; ++h)
      for (int which = 0; which < 2; ++which)
        convert_kv_row(raw.data() + (j / bs) * block_bytes_ + ((which * nkv + h) * bs + j % bs) * row, dst,
                       (which == 0 ? k : v) + (j * nkv + h) * src_row, src, hd, which,
                       key_bias.empty() ? nullptr : key_bias.data() + h * hd, krow.data());
  store_->write_blocks(blocks, raw.data());
  return blocks;
}

int64_t KvCache::blocks_holding(KvDtype d, int64_t n) const {
  const int32_t bs = slots_per_block(d);
  return bs < 1 ? 0 : (n + bs - 1) / bs;
}

void KvCache::convert_layer(int32_t id, int32_t layer, KvDtype dtype, const std::vector<float> &key_bias) {
  LayerSlots &L = seq_mut(id).layers.at(static_cast<size_t>(layer));
  if (dtype == L.dtype) return;
  if (slots_per_block(dtype) < 1)
    fail(Status::unsupported, std::string("KV dtype ") + kv_dtype_name(dtype) + " cannot be held in this cache's blocks");
  const int64_t hd = cfg_.head_dim, nkv = cfg_.n_kv_heads;
  if (!key_bias.empty() && static_cast<int64_t>(key_bias.size()) != hd * nkv)
    fail(Status::invalid_argument, "convert_layer: the K bias has the wrong size");
  // The layer's rows token-major, as import_rows takes them.
  const std::vector<uint8_t> blocks = layer_blocks(id, layer);
  const int32_t n = L.n();
  const auto row = static_cast<size_t>(kv_bytes(L.dtype, hd));
  std::vector<uint8_t> k(static_cast<size_t>(n) * static_cast<size_t>(nkv) * row), v(k.size()), part;
  for (int which = 0; which < 2; ++which) {
    gather_rows(blocks, L.dtype, which, 0, n, part);  // head-major
    std::vector<uint8_t> &dst = which == 0 ? k : v;
    for (int64_t h = 0; h < nkv; ++h)
      for (int32_t j = 0; j < n; ++j)
        std::memcpy(dst.data() + (static_cast<size_t>(j) * static_cast<size_t>(nkv) + static_cast<size_t>(h)) * row,
                    part.data() + (static_cast<size_t>(h) * static_cast<size_t>(n) + static_cast<size_t>(j)) * row, row);
  }
  std::vector<int32_t> taken;
  std::vector<int32_t> fresh;
  try {
    fresh = import_rows(k.data(), v.data(), n, L.dtype, dtype, key_bias, taken);
  } catch (...) {
    release_blocks(taken);
    throw;
  }
  // Nothing below throws: the old blocks go back (shared ones lose a reference) and the table is swapped.
  for (int32_t b : L.blocks) release(b);
  L.blocks.swap(fresh);
  L.dtype = dtype;
  return_memory();
}

}  // namespace infokv
