// KV append into paged blocks and the compaction gather (templates; launchers in kv_cache.cu).
#pragma once
#include "kernels/cuda/common.cuh"

namespace infokv {
namespace cuda {

// One thread per (token, kv head, dim) for K and V. k, v: [n, n_kv_heads, head_dim] f32.
template <typename T>
__global__ void kv_append_kernel(PagedKv kv, int32_t first_slot, const float *k, const float *v, int64_t n) {
  const int64_t row = static_cast<int64_t>(kv.n_kv_heads) * kv.head_dim;
  const int64_t total = n * row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / row;
    const int32_t h = static_cast<int32_t>((i % row) / kv.head_dim);
    const int32_t d = static_cast<int32_t>(i % kv.head_dim);
    const int32_t slot = first_slot + static_cast<int32_t>(t);
    kv_slot<T>(kv, slot, h, 0)[d] = from_f32<T>(k[i]);
    kv_slot<T>(kv, slot, h, 1)[d] = from_f32<T>(v[i]);
  }
}

// Slot moves, pass 1: scratch[i] <- slot (moves[4i], moves[4i+1]); pass 2 (scatter = true): slot (moves[4i+2],
// moves[4i+3]) <- scratch[i]. Two launches on one stream, so every read precedes every write. One thread per
// (move, K/V, kv head, dim). moves: [n][4]; scratch: [n][2][n_kv_heads][head_dim] of T.
template <typename T>
__global__ void kv_move_kernel(PagedKv kv, const int32_t *moves, int64_t n, T *scratch, bool scatter) {
  const int64_t rows = 2LL * kv.n_kv_heads;
  const int64_t per = rows * kv.head_dim;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < per * n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t m = i / per;
    const int64_t r = (i % per) / kv.head_dim;  // which * n_kv_heads + h
    const int32_t d = static_cast<int32_t>(i % kv.head_dim);
    const int32_t *mv = moves + 4 * m + (scatter ? 2 : 0);
    T *slot = reinterpret_cast<T *>(kv.pool + static_cast<int64_t>(mv[0]) * kv.block_stride) +
              (r * kv.block_size + mv[1]) * kv.head_dim + d;
    if (scatter) *slot = scratch[i];
    else scratch[i] = *slot;
  }
}

// kv_append to explicit slot addresses: token t goes to (slot_addr[2t] = block, slot_addr[2t + 1] = slot in the
// block). One thread per (token, kv head, dim). k, v: [n, n_kv_heads, head_dim] f32; slot_addr: [n][2].
template <typename T>
__global__ void kv_append_rows_kernel(PagedKv kv, const int32_t *slot_addr, const float *k, const float *v, int64_t n) {
  const int64_t row = static_cast<int64_t>(kv.n_kv_heads) * kv.head_dim;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n * row; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / row;
    const int32_t h = static_cast<int32_t>((i % row) / kv.head_dim);
    const int32_t d = static_cast<int32_t>(i % kv.head_dim);
    const int32_t *a = slot_addr + 2 * t;
    T *base = reinterpret_cast<T *>(kv.pool + static_cast<int64_t>(a[0]) * kv.block_stride);
    base[(static_cast<int64_t>(h) * kv.block_size + a[1]) * kv.head_dim + d] = from_f32<T>(k[i]);
    base[((static_cast<int64_t>(kv.n_kv_heads) + h) * kv.block_size + a[1]) * kv.head_dim + d] = from_f32<T>(v[i]);
  }
}

}  // namespace cuda
}  // namespace infokv
