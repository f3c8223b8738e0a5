// Block dequantisation of ggml's quantised types, inline so the matmul kernels can expand a weight row into a
// small f32 buffer inside their own (vectorised) code. Each function reads whole blocks; the arithmetic and its
// order follow ggml-quants.c (and the gguf package's numpy dequantisers), so the results are bit-exact with them.
// They are also compiled for the GPU (IKV_HD): the CUDA dequantisation kernel (kernels/cuda/dequant.cu) runs these
// same definitions, so its twin is bit-exact by construction.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/fp16.hpp"
#include "kernels/ggml_blocks.hpp"
#include "kernels/host_device.hpp"

namespace infokv {
namespace dq {

IKV_HD inline float h2f(const uint8_t *p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_float(h);
}

// Q4_0: {f16 d; u8 qs[16]} -> 32 values (q - 8) * d; low nibbles are elements 0..15, high nibbles 16..31.
IKV_HD inline void q4_0(float *y, const uint8_t *b) {
  const float d = h2f(b);
  const uint8_t *qs = b + offsetof(block::Q4_0, qs);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// Q4_1: {f16 d; f16 m; u8 qs[16]} -> q * d + m.
IKV_HD inline void q4_1(float *y, const uint8_t *b) {
  const float d = h2f(b), m = h2f(b + offsetof(block::Q4_1, m));
  const uint8_t *qs = b + offsetof(block::Q4_1, qs);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// Q5_0: {f16 d; u32 qh; u8 qs[16]} -> (q5 - 16) * d, bit 4 of element j in bit j of qh.
IKV_HD inline void q5_0(float *y, const uint8_t *b) {
  const float d = h2f(b);
  uint32_t qh;
  std::memcpy(&qh, b + offsetof(block::Q5_0, qh), 4);
  const uint8_t *qs = b + offsetof(block::Q5_0, qs);
  for (int j = 0; j < 16; ++j) {
    const int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
    y[j] = static_cast<float>(((qs[j] & 0x0F) | h0) - 16) * d;
    y[j + 16] = static_cast<float>(((qs[j] >> 4) | h1) - 16) * d;
  }
}

// Q5_1: {f16 d; f16 m; u32 qh; u8 qs[16]} -> q5 * d + m.
IKV_HD inline void q5_1(float *y, const uint8_t *b) {
  const float d = h2f(b), m = h2f(b + offsetof(block::Q5_1, m));
  uint32_t qh;
  std::memcpy(&qh, b + offsetof(block::Q5_1, qh), 4);
  const uint8_t *qs = b + offsetof(block::Q5_1, qs);
  for (int j = 0; j < 16; ++j) {
    const int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
    y[j] = static_cast<float>((qs[j] & 0x0F) | h0) * d + m;
    y[j + 16] = static_cast<float>((qs[j] >> 4) | h1) * d + m;
  }
}

// Q8_0: {f16 d; i8 qs[32]} -> q * d.
IKV_HD inline void q8_0(float *y, const uint8_t *b) {
  const float d = h2f(b);
  const auto *qs = reinterpret_cast<const int8_t *>(b + offsetof(block::Q8_0, qs));
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(qs[j]) * d;
}

// The 6-bit scale and min of sub-block j of a Q4_K/Q5_K super-block (ggml's get_scale_min_k4).
IKV_HD inline void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = static_cast<uint8_t>((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// The scales and mins of sub-blocks is and is + 1 of a Q4_K/Q5_K super-block, times its d and dmin.
IKV_HD inline void pair_scales_k4(int is, const uint8_t *scales, float d, float dmin, float *d1, float *m1, float *d2,
                                  float *m2) {
  uint8_t sc, m;
  scale_min_k4(is, scales, &sc, &m);
  *d1 = d * sc;
  *m1 = dmin * m;
  scale_min_k4(is + 1, scales, &sc, &m);
  *d2 = d * sc;
  *m2 = dmin * m;
}

// Q4_K: {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]} -> 256 values, 8 sub-blocks of 32: d*sc*q - dmin*m.
IKV_HD inline void q4_k(float *y, const uint8_t *b) {
  const float d = h2f(b), dmin = h2f(b + offsetof(block::Q4_K, dmin));
  const uint8_t *scales = b + offsetof(block::Q4_K, scales), *q = b + offsetof(block::Q4_K, qs);
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
    float d1, m1, d2, m2;
    pair_scales_k4(is, scales, d, dmin, &d1, &m1, &d2, &m2);
    for (int l = 0; l < 32; ++l) y[j + l] = d1 * static_cast<float>(q[l] & 0x0F) - m1;
    for (int l = 0; l < 32; ++l) y[j + 32 + l] = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}

// Q5_K: {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}.
IKV_HD inline void q5_k(float *y, const uint8_t *b) {
  const float d = h2f(b), dmin = h2f(b + offsetof(block::Q5_K, dmin));
  const uint8_t *scales = b + offsetof(block::Q5_K, scales), *qh = b + offsetof(block::Q5_K, qh),
                *ql = b + offsetof(block::Q5_K, qs);
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, ql += 32) {
    float d1, m1, d2, m2;
    pair_scales_k4(is, scales, d, dmin, &d1, &m1, &d2, &m2);
    for (int l = 0; l < 32; ++l) y[j + l] = d1 * static_cast<float>((ql[l] & 0x0F) + (qh[l] & u1 ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) y[j + 32 + l] = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    u1 = static_cast<uint8_t>(u1 << 2);
    u2 = static_cast<uint8_t>(u2 << 2);
  }
}

// Q6_K: {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d} -> (d * sc) * (q6 - 32), 16 sub-blocks of 16.
// Written as two simple loops (unpack the 6-bit integers, then scale 16 at a time) so that compilers vectorise it.
// The 256 signed 6-bit codes (q6 - 32) of a Q6_K super-block, in element order.
IKV_HD inline void q6_k_codes(const uint8_t *b, int8_t *q) {
  const uint8_t *ql = b + offsetof(block::Q6_K, ql), *qh = b + offsetof(block::Q6_K, qh);
  for (int n = 0; n < 2; ++n) {
    const uint8_t *l0 = ql + 64 * n, *h0 = qh + 32 * n;
    int8_t *o = q + 128 * n;
    for (int l = 0; l < 32; ++l) {
      o[l] = static_cast<int8_t>(((l0[l] & 0x0F) | (((h0[l] >> 0) & 3) << 4)) - 32);
      o[l + 32] = static_cast<int8_t>(((l0[l + 32] & 0x0F) | (((h0[l] >> 2) & 3) << 4)) - 32);
      o[l + 64] = static_cast<int8_t>(((l0[l] >> 4) | (((h0[l] >> 4) & 3) << 4)) - 32);
      o[l + 96] = static_cast<int8_t>(((l0[l + 32] >> 4) | (((h0[l] >> 6) & 3) << 4)) - 32);
    }
  }
}

IKV_HD inline void q6_k(float *y, const uint8_t *b) {
  const auto *sc = reinterpret_cast<const int8_t *>(b + offsetof(block::Q6_K, scales));
  const float d = h2f(b + offsetof(block::Q6_K, d));
  int8_t q[256];
  q6_k_codes(b, q);
  // Element 16g..16g+15 uses scale g: within each 128 half, l < 16 and l >= 16 of every 32-run take is and is+1.
  for (int g = 0; g < 16; ++g) {
    const float s = d * sc[g];
    for (int i = 0; i < 16; ++i) y[16 * g + i] = s * static_cast<float>(q[16 * g + i]);
  }
}

}  // namespace dq
}  // namespace infokv
