// A layer's K/V as rows: what snapshots save from the cache and restore into it (KvCache::layer_blocks,
// gather_rows, import_rows), converting between KV dtypes on the way in.
#include <cstring>

#include "kernels/ops.hpp"
#include "kv/kv_cache.hpp"

namespace infokv {

std::vector<uint8_t> KvCache::layer_blocks(int32_t id, int32_t layer) const {
  const LayerSlots &L = seq(id).layers.at(static_cast<size_t>(layer));
  std::vector<uint8_t> raw(L.blocks.size() * static_cast<size_t>(block_bytes_));
  store_->read_blocks(L.blocks, raw.data());
  return raw;
}

void KvCache::host_layer(int32_t id, int32_t layer, HostLayer &out) const {
  out.blocks = layer_blocks(id, layer);
  const auto n_blocks = static_cast<int32_t>(seq(id).layers.at(static_cast<size_t>(layer)).blocks.size());
  out.table.resize(static_cast<size_t>(n_blocks));
  for (int32_t b = 0; b < n_blocks; ++b) out.table[static_cast<size_t>(b)] = b;
  out.view = geometry_;
  out.view.pool = out.blocks.data();
  out.view.block_table = out.table.data();
  out.view.n_slots = seq(id).layers[static_cast<size_t>(layer)].n();
}

void KvCache::gather_rows(const std::vector<uint8_t> &blocks, int which, int32_t first, int32_t n,
                          std::vector<uint8_t> &out) const {
  const KvConfig &c = cfg_;
  const auto row = static_cast<size_t>(kv_bytes(c.dtype, c.head_dim));
  out.resize(static_cast<size_t>(c.n_kv_heads) * static_cast<size_t>(n) * row);
  for (int32_t h = 0; h < c.n_kv_heads; ++h)
    for (int32_t j = 0; j < n; ++j) {
      const int32_t s = first + j;
      const uint8_t *src = blocks.data() + static_cast<int64_t>(s / c.block_size) * block_bytes_ +
                           ((static_cast<int64_t>(which) * c.n_kv_heads + h) * c.block_size + s % c.block_size) *
                               static_cast<int64_t>(row);
      std::memcpy(out.data() + (static_cast<size_t>(h) * static_cast<size_t>(n) + static_cast<size_t>(j)) * row, src, row);
    }
}

std::vector<int32_t> KvCache::import_rows(const uint8_t *k, const uint8_t *v, int64_t n, KvDtype src,
                                          const std::vector<float> &key_bias, std::vector<int32_t> &taken) {
  const KvConfig &kc = cfg_;
  const int32_t bs = kc.block_size;
  const int64_t row = kv_bytes(kc.dtype, kc.head_dim), src_row = kv_bytes(src, kc.head_dim);
  const int64_t hd = kc.head_dim, nkv = kc.n_kv_heads;
  std::vector<int32_t> blocks = alloc_blocks((n + bs - 1) / bs);
  taken.insert(taken.end(), blocks.begin(), blocks.end());
  const float bias_sign = static_cast<float>(kv_keys_less_bias(src)) - static_cast<float>(kv_keys_less_bias(kc.dtype));
  std::vector<float> krow(static_cast<size_t>(hd));
  // Built in host memory block by block, then written to the store (host or device) in one call.
  std::vector<uint8_t> raw(blocks.size() * static_cast<size_t>(block_bytes_), 0);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t h = 0; h < nkv; ++h)
      for (int which = 0; which < 2; ++which) {
        uint8_t *dst = raw.data() + (j / bs) * block_bytes_ + ((which * nkv + h) * bs + j % bs) * row;
        const uint8_t *from = (which == 0 ? k : v) + (j * nkv + h) * src_row;
        if (which == 0 && bias_sign != 0 && !key_bias.empty()) {  // keys less their bias on one side only
          cpu::convert(reinterpret_cast<uint8_t *>(krow.data()), KvDtype::f32, from, src, hd);
          for (int64_t i = 0; i < hd; ++i) krow[static_cast<size_t>(i)] += bias_sign * key_bias[static_cast<size_t>(h * hd + i)];
          cpu::convert(dst, kc.dtype, reinterpret_cast<const uint8_t *>(krow.data()), KvDtype::f32, hd);
        } else {
          cpu::convert(dst, kc.dtype, from, src, hd);
        }
      }
  store_->write_blocks(blocks, raw.data());
  return blocks;
}

}  // namespace infokv
