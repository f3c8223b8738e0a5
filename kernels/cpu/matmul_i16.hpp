// Quantised weights times integer activations for prefill-sized products (16 tokens or more): the decode products'
// arithmetic (matmul_act8.hpp) in a form whose cost is spread over many tokens. Each token's x is quantised per 32
// values to 16-bit integers (d = max|x| / 32767; or to 8-bit precision, d = max|x| / 127, for the int8 setting),
// each weight block's codes are widened once to 16-bit integers, and every block's dot product is an exact integer
// sum (AVX-512 VNNI's vpdpwssd, two products per 32-bit lane); only the block scales are floats, applied once per
// block and token:
//   out[t, r] = sum over blocks b of  (d_x[t, b] * a[r, g]) * idot(c[r, g], q[t, g])   (g: b's scale groups)
//             +                       b_w[r, b] * sum(x[t, b])                          (the types with a min)
// in block order, each step one fused multiply-add. Every output depends on its own token and row only, so the
// result is the same whatever other tokens share the product, however the rows are split over threads, and equal to
// matmul_i16_ref's bits. Whether prefill uses it is cpu_activations() (cpu_features.hpp); the f32 path stays the
// exact reference.
#pragma once
#include <cstdint>

namespace infokv {
class ThreadPool;
namespace cpu {

// Products of this many tokens or more take these kernels when i16_prefill says so (fewer: matmul_quant's f32
// tiles, or the decode dots).
constexpr int64_t kI16MinTokens = 16;

// True for the weight types covered: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K.
bool i16_type(uint32_t type);

// True when a product of `type` with k columns and n tokens takes the integer activations now: n >=
// kI16MinTokens, cpu_activations() not f32, AVX-512 VNNI, i16_type(type), k a multiple of the type's block. Sets
// *qmax (32767 for int16, 127 for int8).
bool i16_prefill(uint32_t type, int64_t n, int64_t k, int32_t *qmax);

// out[n, m] = x[n, k] . W[m, k]^T as above, with the vector kernels (callers check i16_prefill first; false when the
// type or k does not fit or the CPU lacks AVX-512 VNNI). Rows are shared among the pool's threads.
bool matmul_i16(float *out, const float *x, const void *w, uint32_t type, int64_t n, int64_t m, int64_t k,
                int32_t qmax, ThreadPool *pool);

// The portable reference (any CPU): the same quantisation, the same integers and the same float operations in the
// same order, so the same bits. qmax 127 or 32767. False when the type or k does not fit.
bool matmul_i16_ref(float *out, const float *x, const void *w, uint32_t type, int64_t n, int64_t m, int64_t k,
                    int32_t qmax);

}  // namespace cpu
}  // namespace infokv
