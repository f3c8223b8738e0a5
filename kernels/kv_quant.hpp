// The quantised KV dtypes' blocks, one definition for the CPU kernels and the CUDA ones (IKV_HD).
//
// Both quantise each block of 32 values *rotated* by R = H32 * diag(s) / sqrt(32) (H32 the Sylvester Hadamard
// matrix, s fixed random signs): R is orthogonal, so it spreads an outlier channel over the whole block before
// rounding (QuaRot; llama.cpp rotates its quantised cache too), and dequantisation rotates back with
// R^T = diag(s) * H32 / sqrt(32). Attention need not rotate back: q.k = (Rq).(Rk) and sum p v = R^T sum p (Rv), so
// it reads the rotated values (the *_rotated dequantisers), rotating the queries and its output once.
// q8_0: {f16 d; i8 q[32]}, y = q * d, d = max|y| / 127, q = round(y / d): ggml's block_q8_0 and its reference
// quantiser. q4_0: {f16 d; u8 qs[16]}, y = (q - 8) * d with element j in the low nibble of qs[j] and element j + 16
// in the high one, d = -m / 8 where m is the element of largest magnitude: ggml's block_q4_0 and its quantiser.
//
// The values are rounded against the scale as stored (f16), not the f32 one ggml's reference quantiser uses, so each
// reads back within half a step. Values that are not finite, or so large (past 1e37) that the rotation overflows,
// give a block whose scale is NaN (every element reads back NaN), never undefined arithmetic; magnitudes whose scale
// would pass f16's range saturate at its largest scale.
#pragma once
#include <cstdint>
#include <cstring>

#include "kernels/fp16.hpp"
#include "kernels/ggml_blocks.hpp"
#include "kernels/host_device.hpp"

namespace infokv {
namespace kvq {

constexpr int kBlock = 32;
constexpr int kQ8Bytes = sizeof(block::Q8_0), kQ4Bytes = sizeof(block::Q4_0);  // ggml's layouts
constexpr uint16_t kNanScale = 0x7e00;
constexpr float kMaxScale = 65504.0f;
// The rotation's signs, bit j for element j (1: negate); fixed, so every file and process agrees.
constexpr uint32_t kSigns = 0x9b2d64e1u;

IKV_HD inline float scale_of(const uint8_t *b) {
  uint16_t h;
  std::memcpy(&h, b, 2);
  return fp16_to_float(h);
}

IKV_HD inline void put_scale(uint8_t *b, uint16_t h) { std::memcpy(b, &h, 2); }

// In-place unnormalised Walsh-Hadamard transform of 32 values (H32 * x).
IKV_HD inline void fwht32(float *x) {
  for (int h = 1; h < kBlock; h *= 2)
    for (int i = 0; i < kBlock; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
}

constexpr float kInvSqrt32 = 0.17677669529663687f;

// y = R x (32 values).
IKV_HD inline void rotate32(float *y, const float *x) {
  for (int j = 0; j < kBlock; ++j) y[j] = (kSigns >> j) & 1u ? -x[j] : x[j];
  fwht32(y);
  for (int j = 0; j < kBlock; ++j) y[j] *= kInvSqrt32;
}

// x = R^T y, in place (32 values).
IKV_HD inline void unrotate32(float *x) {
  fwht32(x);
  for (int j = 0; j < kBlock; ++j) x[j] = ((kSigns >> j) & 1u ? -x[j] : x[j]) * kInvSqrt32;
}

IKV_HD inline void quantize_q8_0(uint8_t *b, const float *x0) {
  float x[kBlock];
  rotate32(x, x0);
  float amax = 0.0f;
  bool finite = true;
  for (int j = 0; j < kBlock; ++j) {
    const float a = x[j] < 0 ? -x[j] : x[j];
    if (!(a <= 3.40282347e+38f)) finite = false;  // NaN or infinite
    else if (a > amax) amax = a;
  }
  auto *q = reinterpret_cast<int8_t *>(b + 2);
  if (!finite) {
    put_scale(b, kNanScale);
    for (int j = 0; j < kBlock; ++j) q[j] = 0;
    return;
  }
  float d = amax / 127.0f;
  if (d > kMaxScale) d = kMaxScale;
  const uint16_t h = float_to_fp16(d);
  d = fp16_to_float(h);
  const float id = d > 0.0f ? 1.0f / d : 0.0f;
  put_scale(b, h);
  for (int j = 0; j < kBlock; ++j) {
    float v = x[j] * id;
    v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
    q[j] = static_cast<int8_t>(v < 0 ? -static_cast<int>(-v + 0.5f) : static_cast<int>(v + 0.5f));  // roundf
  }
}

// The rotated block's values, before R^T (what attention reads).
IKV_HD inline void dequantize_q8_0_rotated(float *y, const uint8_t *b) {
  const float d = scale_of(b);
  const auto *q = reinterpret_cast<const int8_t *>(b + 2);
  for (int j = 0; j < kBlock; ++j) y[j] = static_cast<float>(q[j]) * d;
}

IKV_HD inline void dequantize_q8_0(float *y, const uint8_t *b) {
  dequantize_q8_0_rotated(y, b);
  unrotate32(y);
}

// ggml's quantize_row_q4_0_ref on the rotated block (rounded against the stored scale).
IKV_HD inline void quantize_q4_0(uint8_t *b, const float *x) {
  float r[kBlock];
  rotate32(r, x);
  float amax = 0.0f, m = 0.0f;
  bool finite = true;
  for (int j = 0; j < kBlock; ++j) {
    const float a = r[j] < 0 ? -r[j] : r[j];
    if (!(a <= 3.40282347e+38f)) finite = false;
    else if (a > amax) amax = a, m = r[j];
  }
  uint8_t *qs = b + 2;
  if (!finite) {
    put_scale(b, kNanScale);
    for (int j = 0; j < kBlock / 2; ++j) qs[j] = 0x88;
    return;
  }
  float d = m / -8.0f;
  if (d > kMaxScale) d = kMaxScale;
  if (d < -kMaxScale) d = -kMaxScale;
  const uint16_t h = float_to_fp16(d);
  d = fp16_to_float(h);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_scale(b, h);
  for (int j = 0; j < kBlock / 2; ++j) {
    float v0 = r[j] * id + 8.5f, v1 = r[j + 16] * id + 8.5f;
    v0 = v0 < 0.0f ? 0.0f : v0 > 15.0f ? 15.0f : v0;
    v1 = v1 < 0.0f ? 0.0f : v1 > 15.0f ? 15.0f : v1;
    qs[j] = static_cast<uint8_t>(static_cast<int>(v0) | (static_cast<int>(v1) << 4));
  }
}

IKV_HD inline void dequantize_q4_0_rotated(float *y, const uint8_t *b) {
  const float d = scale_of(b);
  const uint8_t *qs = b + 2;
  for (int j = 0; j < kBlock / 2; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

IKV_HD inline void dequantize_q4_0(float *y, const uint8_t *b) {
  dequantize_q4_0_rotated(y, b);
  unrotate32(y);
}

// Whether a stored block's scale is a finite number (a snapshot's blocks are checked before they are used).
IKV_HD inline bool scale_finite(const uint8_t *b) {
  uint16_t h;
  std::memcpy(&h, b, 2);
  return (h & 0x7c00u) != 0x7c00u;
}

}  // namespace kvq
}  // namespace infokv
