// KV append into paged blocks and the compaction gather (templates; launchers in kv_cache.cu).
#pragma once
#include "kernels/cuda/common.cuh"

namespace infokv {
namespace cuda {

// One thread per (token, kv head, dim) for K and V. k, v: [n, n_kv_heads, head_dim] f32.
template <typename T>
__global__ void kv_append_kernel(cpu::PagedKv kv, int32_t first_slot, const float *k, const float *v, int64_t n) {
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

// dst slot j <- src slot keep[j]; one thread per (j, K/V, kv head, dim). keep: [n_keep].
template <typename T>
__global__ void kv_gather_kernel(cpu::PagedKv dst, cpu::PagedKv src, const int32_t *keep, int32_t n_keep) {
  const int64_t per = 2LL * src.n_kv_heads * src.head_dim;
  const int64_t total = per * n_keep;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t j = static_cast<int32_t>(i / per);
    const int64_t r = i % per;
    const int which = static_cast<int>(r / (static_cast<int64_t>(src.n_kv_heads) * src.head_dim));
    const int32_t h = static_cast<int32_t>((r / src.head_dim) % src.n_kv_heads);
    const int32_t d = static_cast<int32_t>(r % src.head_dim);
    kv_slot<T>(dst, j, h, which)[d] = kv_slot<T>(src, keep[j], h, which)[d];
  }
}

}  // namespace cuda
}  // namespace infokv
