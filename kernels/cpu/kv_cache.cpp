// KV cache writes and reads over the paged layout: append (a chunk of one sequence, or one token per sequence),
// read back one row, and the slot moves of compaction. CUDA twins: kernels/cuda/kv_cache.cu.
#include <cstring>

#include "kernels/cpu/kv_rows.hpp"
#include "kernels/ops.hpp"

namespace infokv {
namespace cpu {

void kv_append(const PagedKv &kv, int32_t first_slot, const float *k, const float *v, int64_t n) {
  const int64_t row = static_cast<int64_t>(kv.n_kv_heads) * kv.head_dim;
  for (int64_t t = 0; t < n; ++t)
    for (int32_t h = 0; h < kv.n_kv_heads; ++h) {
      store_row(slot_ptr(kv, first_slot + static_cast<int32_t>(t), h, 0), k + t * row + h * kv.head_dim, kv.head_dim, kv.dtype);
      store_row(slot_ptr(kv, first_slot + static_cast<int32_t>(t), h, 1), v + t * row + h * kv.head_dim, kv.head_dim, kv.dtype);
    }
}

void kv_append_rows(const PagedKv &kv, const int32_t *slot_addr, const float *k, const float *v, int64_t n) {
  const int64_t row = static_cast<int64_t>(kv.n_kv_heads) * kv.head_dim;
  for (int64_t t = 0; t < n; ++t) {
    PagedKv one = kv;  // a one-block view of the token's block
    one.block_table = slot_addr + 2 * t;
    one.n_slots = kv.block_size;
    kv_append(one, slot_addr[2 * t + 1], k + t * row, v + t * row, 1);
  }
}

void kv_read(float *out, const PagedKv &kv, int32_t slot, int32_t h, int which) {
  load_row(out, slot_ptr(kv, slot, h, which), kv.head_dim, kv.dtype);
}

void kv_move_slots(const PagedKv &kv, const int32_t *moves, int64_t n, uint8_t *scratch) {
  const auto row = static_cast<size_t>(kv_bytes(kv.dtype, kv.head_dim));
  const int64_t per_slot = int64_t{2} * kv.n_kv_heads;  // rows per slot: K and V of every kv head
  auto at = [&](int32_t block, int32_t s, int64_t r) {  // r = which * n_kv_heads + h
    return kv.pool + static_cast<int64_t>(block) * kv.block_stride + (r * kv.block_size + s) * static_cast<int64_t>(row);
  };
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < per_slot; ++r)
      std::memcpy(scratch + (i * per_slot + r) * static_cast<int64_t>(row), at(moves[4 * i], moves[4 * i + 1], r), row);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < per_slot; ++r)
      std::memcpy(at(moves[4 * i + 2], moves[4 * i + 3], r), scratch + (i * per_slot + r) * static_cast<int64_t>(row), row);
}

}  // namespace cpu
}  // namespace infokv
