// Shared device helpers: element conversions, warp/block reductions, the stream cast and launch checks.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/ops_cuda.hpp"

namespace infokv {
namespace cuda {

inline cudaStream_t raw_stream(Stream *s) { return reinterpret_cast<cudaStream_t>(s); }

// Status of the launch just made (configuration errors surface here; execution errors later, at a sync).
inline Status launch_status() {
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? Status::ok : Status::internal;
}

inline unsigned grid_for(int64_t n, int threads, int64_t cap = 65535LL * 16) {
  int64_t g = (n + threads - 1) / threads;
  if (g > cap) g = cap;  // grid-stride loops cover the rest
  return static_cast<unsigned>(g < 1 ? 1 : g);
}

// ---- element types: float, __half, __nv_bfloat16 ----
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Calls f(T{}) with T the element type of a KvDtype; false for an unknown value and for the quantised dtypes, which
// the CUDA kernels do not store (the session refuses them on a CUDA device).
template <typename F> bool dispatch_kv_dtype(KvDtype t, F &&f) {
  switch (t) {
    case KvDtype::f32: f(float{}); return true;
    case KvDtype::f16: f(__half{}); return true;
    case KvDtype::bf16: f(__nv_bfloat16{}); return true;
    default: return false;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide reductions for blockDim.x a multiple of 32 (<= 1024); every thread gets the result.
// `sh` needs 32 floats of shared memory; the function syncs before returning, so `sh` may be reused.
__device__ __forceinline__ float block_sum(float v, float *sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : 0.0f;
  v = warp_sum(v);
  __syncthreads();
  return v;
}
__device__ __forceinline__ float block_max(float v, float *sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_max(v);
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : -INFINITY;
  v = warp_max(v);
  __syncthreads();
  return v;
}

// Address of (slot, kv head, K or V) in a paged view, through block table `table`: block layout
// [2][n_kv_heads][block_size][head_dim].
template <typename T>
__device__ __forceinline__ T *kv_slot_in(const PagedKv &kv, const int32_t *table, int32_t slot, int32_t h, int which) {
  const int32_t b = table[slot / kv.block_size];
  const int32_t s = slot % kv.block_size;
  const int64_t off = ((static_cast<int64_t>(which) * kv.n_kv_heads + h) * kv.block_size + s) * kv.head_dim;
  return reinterpret_cast<T *>(kv.pool + static_cast<int64_t>(b) * kv.block_stride) + off;
}

template <typename T>
__device__ __forceinline__ T *kv_slot(const PagedKv &kv, int32_t slot, int32_t h, int which) {
  return kv_slot_in<T>(kv, kv.block_table, slot, h, which);
}

}  // namespace cuda
}  // namespace infokv
