// SwiGLU, residual add, dtype conversion, embedding-row gather (templates; launchers in elementwise.cu).
#pragma once
#include "kernels/cuda/common.cuh"

namespace infokv {
namespace cuda {

#define IKV_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// out, gate, up: [n]
__global__ void swiglu_kernel(float *out, const float *gate, const float *up, int64_t n) {
  IKV_GRID_STRIDE(i, n) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

// x, y: [n]
__global__ void add_kernel(float *x, const float *y, int64_t n) {
  IKV_GRID_STRIDE(i, n) x[i] += y[i];
}

// x: [total / d, d]; b: [d]
__global__ void add_bias_kernel(float *x, const float *b, int64_t total, int64_t d) {
  IKV_GRID_STRIDE(i, total) x[i] += b[i % d];
}

// dst: [n] of D; src: [n] of S
template <typename D, typename S>
__global__ void convert_kernel(D *dst, const S *src, int64_t n) {
  IKV_GRID_STRIDE(i, n) dst[i] = from_f32<D>(to_f32(src[i]));
}

// out: [n_rows, d]; emb: [*, d] of T; rows: [n_rows]
template <typename T>
__global__ void get_rows_kernel(float *out, const T *emb, const int32_t *rows, int64_t n_rows, int64_t d) {
  IKV_GRID_STRIDE(i, n_rows * d) {
    const int64_t r = i / d, c = i % d;
    out[i] = to_f32(emb[static_cast<int64_t>(rows[r]) * d + c]);
  }
}

}  // namespace cuda
}  // namespace infokv
