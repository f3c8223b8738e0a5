// Quantised weights times 8-bit activations (see matmul_act8.hpp). The portable reference is written per block in
// plain integers; the AVX-512 VNNI kernels compute the same integer sums with vpdpbusd, which multiplies unsigned
// weight bytes by signed activation bytes: the weights enter as their unsigned codes (a Q4_0 nibble 0..15, a Q8_0
// byte with its sign bit flipped) and the code's offset (8, 128, ...) times the activations' sum is taken off by
// starting each accumulator at Act8::corr, the activations' per-4 sums times -offset, computed once per token.
#include "kernels/cpu/simd.hpp"

#include "kernels/cpu/matmul_act8.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/matmul_quant.hpp"
#include "kernels/cpu/gemm_tile.hpp"
#include "kernels/thread_pool.hpp"
#include "kernels/ggml_blocks.hpp"
#include "kernels/ggml_types.hpp"

namespace infokv {
namespace cpu {

namespace {

bool is_super(uint32_t type) {
  return type == static_cast<uint32_t>(GgmlType::Q4_K) || type == static_cast<uint32_t>(GgmlType::Q6_K);
}

// The offset of a type's unsigned weight codes: the weight is (code - offset) times its scale (Q4_1 and Q4_K have
// a min instead, applied through sum32).
int32_t code_offset(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::Q4_0: return 8;
    case GgmlType::Q5_0: return 16;
    case GgmlType::Q8_0: return 128;
    case GgmlType::Q6_K: return 32;
    default: return 0;
  }
}

int64_t block_bytes(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::Q4_0: return sizeof(block::Q4_0);
    case GgmlType::Q4_1: return sizeof(block::Q4_1);
    case GgmlType::Q5_0: return sizeof(block::Q5_0);
    case GgmlType::Q8_0: return sizeof(block::Q8_0);
    case GgmlType::Q4_K: return sizeof(block::Q4_K);
    case GgmlType::Q6_K: return sizeof(block::Q6_K);
    default: return 0;
  }
}

// Round to nearest, ties to even, for |v| < 2^22 (the default rounding of the FPU, as cvtps2dq rounds).
inline float round_even(float v) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (v + kMagic) - kMagic;
}

// The 32 unsigned weight codes of one 32-element block (Q4_0, Q4_1, Q5_0, Q8_0 with its sign bit flipped).
void codes32(const uint8_t *blk, uint32_t type, int32_t c[32]) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::Q4_0:
    case GgmlType::Q4_1: {
      const bool q4_1 = type == static_cast<uint32_t>(GgmlType::Q4_1);
      const uint8_t *qs = blk + (q4_1 ? offsetof(block::Q4_1, qs) : offsetof(block::Q4_0, qs));
      for (int j = 0; j < 16; ++j) {
        c[j] = qs[j] & 0x0F;
        c[j + 16] = qs[j] >> 4;
      }
      break;
    }
    case GgmlType::Q5_0: {
      uint32_t qh;
      std::memcpy(&qh, blk + offsetof(block::Q5_0, qh), 4);
      const uint8_t *qs = blk + offsetof(block::Q5_0, qs);
      for (int j = 0; j < 16; ++j) {
        c[j] = (qs[j] & 0x0F) | static_cast<int32_t>(((qh >> j) << 4) & 0x10);
        c[j + 16] = (qs[j] >> 4) | static_cast<int32_t>((qh >> (j + 12)) & 0x10);
      }
      break;
    }
    default:  // Q8_0
      for (int j = 0; j < 32; ++j) c[j] = static_cast<int8_t>(blk[2 + j]) + 128;
      break;
  }
}

}  // namespace

bool act8_type(uint32_t type) { return block_bytes(type) != 0; }

namespace {

void act8_shape(int64_t k, uint32_t type, int planes, Act8 *a) {
  a->k = k;
  a->block = is_super(type) ? 256 : 32;
  a->planes = planes == 2 ? 2 : 1;
  a->q.resize(static_cast<size_t>(k));
  a->q2.resize(a->planes == 2 ? static_cast<size_t>(k) : 0);
  a->d.resize(static_cast<size_t>(k / a->block));
  a->unit.resize(static_cast<size_t>(k / a->block));
  a->corr.resize(static_cast<size_t>(k / 4));
  a->corr2.resize(a->planes == 2 ? static_cast<size_t>(k / 4) : 0);
  a->qsum32.resize(static_cast<size_t>(k / 32));
  a->dsum32.resize(static_cast<size_t>(k / 32));
  a->ud.resize(a->block == 32 ? static_cast<size_t>(k / 16) : 0);
}

void act8_sums(Act8 *a) {
  for (int64_t c = 0; c < a->k / 32; ++c) {
    int32_t s = 0, s2 = 0;
    for (int j = 0; j < 32; ++j) s += a->q[static_cast<size_t>(32 * c + j)];
    if (a->planes == 2)
      for (int j = 0; j < 32; ++j) s2 += a->q2[static_cast<size_t>(32 * c + j)];
    const float qs = static_cast<float>(s) + static_cast<float>(s2) * (1.0f / 256.0f);  // exact: |s2| < 2^13
    a->qsum32[static_cast<size_t>(c)] = qs;
    a->dsum32[static_cast<size_t>(c)] = a->d[static_cast<size_t>(c * 32 / a->block)] * qs;
  }
  if (a->block == 32)
    for (int64_t b = 0; b < a->k / 32; ++b) {
      a->ud[static_cast<size_t>(2 * b)] = a->unit[static_cast<size_t>(b)];
      a->ud[static_cast<size_t>(2 * b + 1)] = a->dsum32[static_cast<size_t>(b)];
    }
}

// Block b (32 values) of a 32-element type against the activations, in integers: sum (code - offset) * (code of x
// in units), times the weight scale and the unit, plus Q4_1's min times d * sum(x).
float block32_ref(const uint8_t *blk, uint32_t type, const Act8 &a, int64_t b) {
  int32_t c[32];
  codes32(blk, type, c);
  const int32_t offset = code_offset(type);
  int64_t s = 0;
  for (int j = 0; j < 32; ++j) {
    const size_t i = static_cast<size_t>(32 * b + j);
    const int64_t x = a.planes == 2 ? 256 * int64_t{a.q[i]} + a.q2[i] : a.q[i];
    s += (c[j] - offset) * x;
  }
  float r = dq::h2f(blk) * a.unit[static_cast<size_t>(b)] * static_cast<float>(s);
  if (type == static_cast<uint32_t>(GgmlType::Q4_1))
    r += dq::h2f(blk + offsetof(block::Q4_1, m)) * a.dsum32[static_cast<size_t>(b)];
  return r;
}

using DotFn = float (*)(const uint8_t *, const Act8 &, uint32_t);
// Four tokens' dots of one row at once (out[4]), each with the bits DotFn gives it alone.
using Dot4Fn = void (*)(const uint8_t *, const Act8 *const *, uint32_t, float *);
float ref_entry(const uint8_t *row, const Act8 &a, uint32_t type) { return act8_dot_ref(row, type, a); }

#if IKV_X86
// The AVX-512 VNNI kernels. Zen 4/5, Ice Lake and later have them; elsewhere decode keeps the f32 path.

IKV_TARGET_AVX512_VNNI inline float h2f_vnni(const uint8_t *p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// x quantised as act8_quantize_ref does, 16 values per step: the same maximum, scale and rounding (cvtps2dq rounds
// to nearest even), so the bytes are identical.
IKV_TARGET_AVX512_VNNI void quantize_vnni(const float *x, int32_t offset, Act8 *a) {
  const int64_t block = a->block;
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  for (int64_t b = 0; b < a->k / block; ++b) {
    const float *xb = x + b * block;
    __m512 mx = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (int64_t i = 0; i < block; i += 16) {
      const __m512 v = _mm512_loadu_ps(xb + i);
      bad = static_cast<__mmask16>(bad | _mm512_fpclass_ps_mask(v, 0x99));  // NaN or +-Inf
      mx = _mm512_max_ps(mx, _mm512_abs_ps(v));
    }
    const float amax = _mm512_reduce_max_ps(mx);
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    if (!(id <= std::numeric_limits<float>::max())) d = id = 0.0f;  // a scale too small to invert: a block of zeros
    if (bad != 0) {  // NaN or Inf in x: the outputs become NaN, as the f32 path's would
      d = std::numeric_limits<float>::quiet_NaN();
      id = 0.0f;
    }
    a->d[static_cast<size_t>(b)] = d;
    a->unit[static_cast<size_t>(b)] = a->planes == 2 ? d * (1.0f / 256.0f) : d;
    // with id 0 every code is 0 and d carries the NaN
    const __m512 vid = _mm512_set1_ps(id);
    for (int64_t i = 0; i < block; i += 16) {
      const __m512 t = _mm512_mul_ps(_mm512_loadu_ps(xb + i), vid);
      const __m512i qi = _mm512_cvtps_epi32(t);
      _mm_storeu_si128(reinterpret_cast<__m128i *>(a->q.data() + b * block + i), _mm512_cvtsepi32_epi8(qi));
      if (a->planes == 2) {
        const __m512 r = _mm512_mul_ps(_mm512_sub_ps(t, _mm512_cvtepi32_ps(qi)), _mm512_set1_ps(256.0f));
        const __m512i q2 = _mm512_min_epi32(hi, _mm512_max_epi32(lo, _mm512_cvtps_epi32(r)));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(a->q2.data() + b * block + i), _mm512_cvtsepi32_epi8(q2));
      }
    }
  }
  const __m512i ones = _mm512_set1_epi8(1), neg_off = _mm512_set1_epi32(-offset);
  for (int64_t i = 0; i < a->k; i += 64) {
    const __m512i s4 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(a->q.data() + i));
    _mm512_storeu_si512(a->corr.data() + i / 4, _mm512_mullo_epi32(s4, neg_off));
    if (a->planes == 2) {
      const __m512i t4 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(a->q2.data() + i));
      _mm512_storeu_si512(a->corr2.data() + i / 4, _mm512_mullo_epi32(_mm512_add_epi32(_mm512_slli_epi32(s4, 8), t4), neg_off));
    }
  }
}

IKV_TARGET_AVX512_VNNI inline __m512i lanes_div(int shift, int base) {
  return _mm512_add_epi32(_mm512_set1_epi32(base),
                          _mm512_srli_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), shift));
}

enum class A8 { q4_0, q4_1, q5_0, q8_0 };

constexpr GgmlType a8_type(A8 K) {
  return K == A8::q4_0   ? GgmlType::Q4_0
         : K == A8::q4_1 ? GgmlType::Q4_1
         : K == A8::q5_0 ? GgmlType::Q5_0
                         : GgmlType::Q8_0;
}
constexpr int64_t a8_bb(A8 K) { return ggml_block_bytes(a8_type(K)); }
// Where a block's codes start.
constexpr int64_t a8_qs(A8 K) { return block::codes_offset(a8_type(K)); }

// Blocks b and b + 1 (at blk, blk + BB) as 64 unsigned codes in element order.
template <A8 K>
IKV_TARGET_AVX512_VNNI inline __m512i pair_codes(const uint8_t *blk) {
  constexpr int64_t BB = a8_bb(K);
  if constexpr (K == A8::q8_0) {
    const __m512i v = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk + a8_qs(K)))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk + BB + a8_qs(K))), 1);
    return _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
  } else {
    constexpr int64_t off = a8_qs(K);
    const __m256i v = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(blk + off))),
        _mm_loadu_si128(reinterpret_cast<const __m128i *>(blk + BB + off)), 1);
    // [qs0, qs0, qs1, qs1], the second copy of each shifted down a nibble: low nibbles are elements 0..15
    const __m512i z = _mm512_shuffle_i64x2(_mm512_castsi256_si512(v), _mm512_castsi256_si512(v), 0x50);
    __m512i c = _mm512_and_si512(_mm512_srlv_epi64(z, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0)), _mm512_set1_epi8(0x0F));
    if constexpr (K == A8::q5_0) {  // bit j of qh is element j's fifth bit
      uint32_t h0, h1;
      std::memcpy(&h0, blk + offsetof(block::Q5_0, qh), 4);
      std::memcpy(&h1, blk + BB + offsetof(block::Q5_0, qh), 4);
      const __mmask64 hb = static_cast<__mmask64>(h0) | (static_cast<__mmask64>(h1) << 32);
      c = _mm512_mask_add_epi8(c, hb, c, _mm512_set1_epi8(0x10));
    }
    return c;
  }
}

// [s0 x 8, s1 x 8]: each block's weight scale times its activations' unit.
template <A8 K>
IKV_TARGET_AVX512_VNNI inline __m512 pair_scales(const uint8_t *blk, const float *unit, __m512i idx) {
  uint16_t h0, h1;
  std::memcpy(&h0, blk, 2);
  std::memcpy(&h1, blk + a8_bb(K), 2);
  const __m128 dw = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(h0 | (static_cast<uint32_t>(h1) << 16))));
  double dd;
  std::memcpy(&dd, unit, 8);
  const __m128 s = _mm_mul_ps(dw, _mm_castpd_ps(_mm_set_sd(dd)));
  return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(s));
}

// The integer dot of 64 codes with activation bytes at xo, started at corr: with two planes, 256 times the first
// plane's sum plus the second's.
template <int P>
IKV_TARGET_AVX512_VNNI inline __m512i codes_dot(__m512i start, __m512i w, const Act8 &a, int64_t xo) {
  if constexpr (P == 1) return _mm512_dpbusd_epi32(start, w, _mm512_loadu_si512(a.q.data() + xo));
  const __m512i hi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, _mm512_loadu_si512(a.q.data() + xo));
  return _mm512_dpbusd_epi32(_mm512_add_epi32(_mm512_slli_epi32(hi, 8), start), w, _mm512_loadu_si512(a.q2.data() + xo));
}

// The accumulator start of the 16 lanes from value xo: -offset times the activations' per-4 sums (Act8::corr, or
// corr2 for two planes).
template <int P>
IKV_TARGET_AVX512_VNNI inline __m512i corr_at(const Act8 &a, int64_t xo) {
  return _mm512_loadu_si512((P == 2 ? a.corr2.data() : a.corr.data()) + xo / 4);
}

// One pair of blocks (p, p + 1) into f; the min terms of Q4_1 into mins.
template <A8 K, int P>
IKV_TARGET_AVX512_VNNI inline void pair_a8(const uint8_t *row, const Act8 &a, int64_t p, __m512i idx, __m512 &f, float &mins) {
  constexpr int64_t BB = a8_bb(K);
  const uint8_t *blk = row + p * BB;
  const __m512i start = K == A8::q4_1 ? _mm512_setzero_si512() : corr_at<P>(a, 32 * p);
  const __m512i acc = codes_dot<P>(start, pair_codes<K>(blk), a, 32 * p);
  f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), pair_scales<K>(blk, a.unit.data() + p, idx), f);
  if constexpr (K == A8::q4_1)
    mins += h2f_vnni(blk + offsetof(block::Q4_1, m)) * a.dsum32[static_cast<size_t>(p)] +
            h2f_vnni(blk + BB + offsetof(block::Q4_1, m)) * a.dsum32[static_cast<size_t>(p + 1)];
}

// The 32-element types, for T tokens at once (T = 1: one token's dot): four blocks per step as two vectors of two
// (two accumulators per token), then a last pair and an odd last block. Each block pair's codes are unpacked once
// and dotted with every token's bytes; the four blocks' scales are converted by one instruction, [s0, n0, s1, n1, s2,
// n2, s3, n3] once multiplied by a token's Act8::ud: s a block's weight scale times its activations' unit and, for
// Q4_1, n its min times d * sum(x) (the f16 pair d, m converted together; the other types' n lanes are 0 and unused).
// Each token's sums are formed by the same operations in the same order whatever T is, so a token gets the same bits
// alone or batched with others (and a sequence the same logits). The K types below work the same way.
template <A8 K, int P, int T>
IKV_TARGET_AVX512_VNNI void dot_a8_multi(const uint8_t *row, const Act8 *const *a, uint32_t type, float *out) {
  constexpr int64_t BB = a8_bb(K);
  const int64_t nb = a[0]->k / 32;
  const __m512i idx = lanes_div(3, 0), idx_a = _mm512_slli_epi32(idx, 1), idx_b = _mm512_add_epi32(idx_a, _mm512_set1_epi32(4));
  const __m512i zero = _mm512_setzero_si512();
  __m512 f0[T], f1[T];
  __m256 mn[T];
  float mins[T];
  for (int t = 0; t < T; ++t) {
    f0[t] = _mm512_setzero_ps();
    f1[t] = _mm512_setzero_ps();
    mn[t] = _mm256_setzero_ps();
    mins[t] = 0.0f;
  }
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    const uint8_t *blk = row + b * BB;
    int32_t w4[4];
    for (int i = 0; i < 4; ++i) {
      if constexpr (K == A8::q4_1) {
        std::memcpy(&w4[i], blk + i * BB, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, blk + i * BB, 2);
        w4[i] = h;
      }
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_set_epi32(w4[3], w4[2], w4[1], w4[0]));
    const __m512i c0 = pair_codes<K>(blk), c1 = pair_codes<K>(blk + 2 * BB);
    for (int t = 0; t < T; ++t) {
      const Act8 &at = *a[t];
      const __m512 sq = _mm512_castps256_ps512(_mm256_mul_ps(dw, _mm256_loadu_ps(at.ud.data() + 2 * b)));
      const __m512i acc0 = codes_dot<P>(K == A8::q4_1 ? zero : corr_at<P>(at, 32 * b), c0, at, 32 * b);
      const __m512i acc1 = codes_dot<P>(K == A8::q4_1 ? zero : corr_at<P>(at, 32 * b + 64), c1, at, 32 * b + 64);
      f0[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc0), _mm512_permutexvar_ps(idx_a, sq), f0[t]);
      f1[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc1), _mm512_permutexvar_ps(idx_b, sq), f1[t]);
      if constexpr (K == A8::q4_1) mn[t] = _mm256_add_ps(mn[t], _mm512_castps512_ps256(sq));
    }
  }
  for (int t = 0; t < T; ++t) {
    if constexpr (K == A8::q4_1) {
      alignas(32) float m8[8];
      _mm256_store_ps(m8, mn[t]);
      mins[t] = (m8[1] + m8[3]) + (m8[5] + m8[7]);
    }
    int64_t bt = b;
    if (bt + 2 <= nb) {
      pair_a8<K, P>(row, *a[t], bt, idx, f0[t], mins[t]);
      bt += 2;
    }
    float r = _mm512_reduce_add_ps(_mm512_add_ps(f0[t], f1[t])) + mins[t];
    if (bt < nb) r += block32_ref(row + bt * BB, type, *a[t], bt);  // an odd last block
    out[t] = r;
  }
}

// Q4_K: per super-block, sum_j sc_j * dot(q_j, x_j) in integers (sub-block pairs 2jj, 2jj + 1 are the low and high
// nibbles of the same 32 bytes), then d * unit times that, less dmin * d * sum_j m_j * sum(x_j).
template <int P, int T>
IKV_TARGET_AVX512_VNNI void dot_q4k_a8_multi(const uint8_t *row, const Act8 *const *a, uint32_t, float *out) {
  const int64_t nsb = a[0]->k / 256;
  __m512i idx[4];
  for (int jj = 0; jj < 4; ++jj) idx[jj] = lanes_div(3, 2 * jj);
  __m512 f[T];
  __m256 mins[T];
  for (int t = 0; t < T; ++t) {
    f[t] = _mm512_setzero_ps();
    mins[t] = _mm256_setzero_ps();
  }
  const __m512i zero = _mm512_setzero_si512();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t *blk = row + ggml_block_bytes(GgmlType::Q4_K) * sb;
    // the eight 6-bit scales and mins (dq::scale_min_k4) as bytes, with 32-bit operations: u[0..1] the scales,
    // u[2..3] the mins
    uint32_t u[4];
    std::memcpy(u, blk + offsetof(block::Q4_K, scales), 12);
    constexpr uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, k2 = 0x03030303;
    u[3] = ((u[2] >> 4) & k4) | (((u[1] >> 6) & k2) << 4);
    const uint32_t m_lo = u[1] & k6;
    u[1] = (u[2] & k4) | (((u[0] >> 6) & k2) << 4);
    u[2] = m_lo;
    u[0] &= k6;
    const __m128i scm = _mm_loadu_si128(reinterpret_cast<const __m128i *>(u));
    const __m512i scv = _mm512_cvtepu8_epi32(scm);  // lanes 0..7 the scales (8..15 the mins, unused here)
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = zero;
    for (int jj = 0; jj < 4; ++jj) {
      const __m256i v =
          _mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk + offsetof(block::Q4_K, qs) + 32 * jj));
      const __m512i z = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1),
                                         _mm512_set1_epi8(0x0F));
      const __m512i sc = _mm512_permutexvar_epi32(idx[jj], scv);
      for (int t = 0; t < T; ++t)
        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(codes_dot<P>(zero, z, *a[t], 256 * sb + 64 * jj), sc));
    }
    const __m256 mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(scm, 8)));
    const float dmin = h2f_vnni(blk + offsetof(block::Q4_K, dmin)), d = h2f_vnni(blk + offsetof(block::Q4_K, d));
    for (int t = 0; t < T; ++t) {
      const Act8 &at = *a[t];
      const __m256 qs = _mm256_loadu_ps(at.qsum32.data() + 8 * sb);
      mins[t] = _mm256_fmadd_ps(_mm256_mul_ps(mn, qs), _mm256_set1_ps(dmin * at.d[static_cast<size_t>(sb)]), mins[t]);
      f[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_set1_ps(d * at.unit[static_cast<size_t>(sb)]), f[t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    const __m128 m4 = _mm_add_ps(_mm256_castps256_ps128(mins[t]), _mm256_extractf128_ps(mins[t], 1));
    const __m128 m2 = _mm_add_ps(m4, _mm_movehl_ps(m4, m4));
    out[t] = _mm512_reduce_add_ps(f[t]) - _mm_cvtss_f32(_mm_add_ss(m2, _mm_movehdup_ps(m2)));
  }
}

// Q6_K: the 6-bit codes of each half (128 values) as two vectors of 64 in element order (see dq::q6_k: low nibbles
// of ql[0..63] with qh bit pairs 0 and 1 are values 0..63, high nibbles with bit pairs 2 and 3 values 64..127), each
// group of 16 times its signed scale, summed in integers per super-block (at most 2^31 - 2^23 in magnitude with two
// planes: 4 products of 4 * 32 * 127 * 257 * 128).
template <int P, int T>
IKV_TARGET_AVX512_VNNI void dot_q6k_a8_multi(const uint8_t *row, const Act8 *const *a, uint32_t, float *out) {
  const int64_t nsb = a[0]->k / 256;
  const __m512i idx_a0 = lanes_div(2, 0), idx_b0 = lanes_div(2, 4), idx_a1 = lanes_div(2, 8), idx_b1 = lanes_div(2, 12);
  const __m512i shl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i shr = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  const __m512i zero = _mm512_setzero_si512();
  __m512 f[T];
  for (int t = 0; t < T; ++t) f[t] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t *blk = row + ggml_block_bytes(GgmlType::Q6_K) * sb;
    const __m512i scv =
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(blk + offsetof(block::Q6_K, scales))));
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = zero;
    for (int n = 0; n < 2; ++n) {
      const __m512i l = _mm512_loadu_si512(blk + offsetof(block::Q6_K, ql) + 64 * n);
      const __m512i h = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk + offsetof(block::Q6_K, qh) + 32 * n)));
      const __m512i ca = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(_mm512_sllv_epi16(h, shl), m30));
      const __m512i cb = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                         _mm512_and_si512(_mm512_srlv_epi16(h, shr), m30));
      const __m512i sa = _mm512_permutexvar_epi32(n == 0 ? idx_a0 : idx_a1, scv);
      const __m512i sbv = _mm512_permutexvar_epi32(n == 0 ? idx_b0 : idx_b1, scv);
      const int64_t xo = 256 * sb + 128 * n;
      for (int t = 0; t < T; ++t) {
        const __m512i da = codes_dot<P>(corr_at<P>(*a[t], xo), ca, *a[t], xo);
        const __m512i db = codes_dot<P>(corr_at<P>(*a[t], xo + 64), cb, *a[t], xo + 64);
        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(da, sa));
        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(db, sbv));
      }
    }
    const float d = h2f_vnni(blk + offsetof(block::Q6_K, d));
    for (int t = 0; t < T; ++t)
      f[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_set1_ps(d * a[t]->unit[static_cast<size_t>(sb)]), f[t]);
  }
  for (int t = 0; t < T; ++t) out[t] = _mm512_reduce_add_ps(f[t]);
}

// One token's dot: a T-token kernel run with T = 1.
template <Dot4Fn Multi>
IKV_TARGET_AVX512_VNNI float one_token(const uint8_t *row, const Act8 &a, uint32_t type) {
  const Act8 *one = &a;
  float r;
  Multi(row, &one, type, &r);
  return r;
}

template <int P>
DotFn vnni_dot(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::Q4_0: return one_token<dot_a8_multi<A8::q4_0, P, 1>>;
    case GgmlType::Q4_1: return one_token<dot_a8_multi<A8::q4_1, P, 1>>;
    case GgmlType::Q5_0: return one_token<dot_a8_multi<A8::q5_0, P, 1>>;
    case GgmlType::Q8_0: return one_token<dot_a8_multi<A8::q8_0, P, 1>>;
    case GgmlType::Q4_K: return one_token<dot_q4k_a8_multi<P, 1>>;
    case GgmlType::Q6_K: return one_token<dot_q6k_a8_multi<P, 1>>;
    default: return nullptr;
  }
}

template <int P>
Dot4Fn vnni_dot4(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::Q4_0: return dot_a8_multi<A8::q4_0, P, 4>;
    case GgmlType::Q4_1: return dot_a8_multi<A8::q4_1, P, 4>;
    case GgmlType::Q5_0: return dot_a8_multi<A8::q5_0, P, 4>;
    case GgmlType::Q8_0: return dot_a8_multi<A8::q8_0, P, 4>;
    case GgmlType::Q4_K: return dot_q4k_a8_multi<P, 4>;
    case GgmlType::Q6_K: return dot_q6k_a8_multi<P, 4>;
    default: return nullptr;
  }
}
#endif  // IKV_X86

// The dot of one row with one token's activations (planes 1 or 2): VNNI where act8_fast(), else the reference.
DotFn dot_for(uint32_t type, int planes) {
#if IKV_X86
  if (act8_fast()) return planes == 2 ? vnni_dot<2>(type) : vnni_dot<1>(type);
#endif
  (void)type, (void)planes;
  return ref_entry;
}

// The four-token dot (VNNI only), or nullptr: tokens then go one at a time through dot_for's.
Dot4Fn dot4_for(uint32_t type, int planes) {
#if IKV_X86
  if (act8_fast()) return planes == 2 ? vnni_dot4<2>(type) : vnni_dot4<1>(type);
#endif
  (void)type, (void)planes;
  return nullptr;
}

// Rows m0 .. m1-1 for every token, each row's bytes asked for tile::fused_ahead() bytes before they are read, as
// the f32 decode dots do. With dot4, tokens go four at a time through it (the row unpacked once for the four).
void rows_act8(DotFn dot, Dot4Fn dot4, float *out, const Act8 *acts, int64_t n, const uint8_t *w, uint32_t type,
               int64_t row_bytes, int64_t m0, int64_t m1, int64_t m) {
  const int64_t ahead_bytes = tile::fused_ahead();
  if (dot4 == nullptr || n < 4) {
    for (int64_t r = m0; r < m1; ++r) {
      const int64_t ahead = r * row_bytes + ahead_bytes;
      tile::prefetch_l1(w, ahead, std::min(m1 * row_bytes, ahead + row_bytes));
      for (int64_t t = 0; t < n; ++t) out[t * m + r] = dot(w + r * row_bytes, acts[t], type);
    }
    return;
  }
  // Rows in blocks of about 16 KiB, each block dotted with one group of four tokens after another: a group's
  // activations stay in L1 beside the block instead of all tokens' passing through it for every row.
  const int64_t rows_per_block = std::max<int64_t>(1, (int64_t{16} << 10) / std::max<int64_t>(row_bytes, 1));
  for (int64_t r0 = m0; r0 < m1; r0 += rows_per_block) {
    const int64_t r1 = std::min(m1, r0 + rows_per_block);
    int64_t t = 0;
    for (; t + 4 <= n; t += 4) {
      const Act8 *four[4] = {&acts[t], &acts[t + 1], &acts[t + 2], &acts[t + 3]};
      for (int64_t r = r0; r < r1; ++r) {
        if (t == 0) {
          const int64_t ahead = r * row_bytes + ahead_bytes;
          tile::prefetch_l1(w, ahead, std::min(m1 * row_bytes, ahead + row_bytes));
        }
        float o[4];
        dot4(w + r * row_bytes, four, type, o);
        for (int i = 0; i < 4; ++i) out[(t + i) * m + r] = o[i];
      }
    }
    for (; t < n; ++t)
      for (int64_t r = r0; r < r1; ++r) out[t * m + r] = dot(w + r * row_bytes, acts[t], type);
  }
}

}  // namespace

bool act8_fast() { return cpu_has_avx512_vnni(); }

void act8_quantize_ref(const float *x, int64_t k, uint32_t type, int planes, Act8 *a) {
  act8_shape(k, type, planes, a);
  for (int64_t b = 0; b < k / a->block; ++b) {
    const float *xb = x + b * a->block;
    float amax = 0.0f;
    bool finite = true;
    for (int64_t i = 0; i < a->block; ++i) {
      if (!std::isfinite(xb[i])) finite = false;
      else amax = std::max(amax, std::fabs(xb[i]));
    }
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    // A scale too small to invert (max|x| under about 4e-37: 1 / d would be infinite, and 0 * inf NaN) makes the
    // block zeros; the vector quantisation does the same.
    if (!(id <= std::numeric_limits<float>::max())) d = id = 0.0f;
    if (!finite) {
      d = std::numeric_limits<float>::quiet_NaN();
      id = 0.0f;
    }
    a->d[static_cast<size_t>(b)] = d;
    a->unit[static_cast<size_t>(b)] = a->planes == 2 ? d * (1.0f / 256.0f) : d;
    for (int64_t i = 0; i < a->block; ++i) {
      const size_t at = static_cast<size_t>(b * a->block + i);
      const float t = finite ? xb[i] * id : 0.0f, q = round_even(t);
      a->q[at] = static_cast<int8_t>(q);
      if (a->planes == 2) a->q2[at] = static_cast<int8_t>(std::min(127.0f, std::max(-127.0f, round_even((t - q) * 256.0f))));
    }
  }
  const int32_t offset = code_offset(type);
  for (int64_t i = 0; i < k / 4; ++i) {
    const int8_t *q = a->q.data() + 4 * i;
    a->corr[static_cast<size_t>(i)] = -offset * (q[0] + q[1] + q[2] + q[3]);
    if (a->planes == 2) {
      const int8_t *q2 = a->q2.data() + 4 * i;
      a->corr2[static_cast<size_t>(i)] = -offset * (256 * (q[0] + q[1] + q[2] + q[3]) + q2[0] + q2[1] + q2[2] + q2[3]);
    }
  }
  act8_sums(a);
}

void act8_quantize(const float *x, int64_t k, uint32_t type, int planes, Act8 *a) {
#if IKV_X86
  if (act8_fast() && k % 64 == 0) {
    act8_shape(k, type, planes, a);
    quantize_vnni(x, code_offset(type), a);
    act8_sums(a);
    return;
  }
#endif
  act8_quantize_ref(x, k, type, planes, a);
}

float act8_dot_ref(const uint8_t *row, uint32_t type, const Act8 &a) {
  float acc = 0.0f;
  auto xcode = [&a](int64_t i) -> int64_t {
    const size_t at = static_cast<size_t>(i);
    return a.planes == 2 ? 256 * int64_t{a.q[at]} + a.q2[at] : a.q[at];
  };
  if (type == static_cast<uint32_t>(GgmlType::Q4_K)) {
    for (int64_t sb = 0; sb < a.k / 256; ++sb) {
      const uint8_t *blk = row + ggml_block_bytes(GgmlType::Q4_K) * sb, *qs = blk + offsetof(block::Q4_K, qs);
      int64_t isum = 0;
      float msum = 0.0f;
      for (int j = 0; j < 8; ++j) {
        uint8_t sc, mn;
        dq::scale_min_k4(j, blk + offsetof(block::Q4_K, scales), &sc, &mn);
        int64_t s = 0;
        for (int l = 0; l < 32; ++l) {
          const int32_t c = j % 2 == 0 ? (qs[32 * (j / 2) + l] & 0x0F) : (qs[32 * (j / 2) + l] >> 4);
          s += c * xcode(256 * sb + 32 * j + l);
        }
        isum += sc * s;
        msum += static_cast<float>(mn) * a.qsum32[static_cast<size_t>(8 * sb + j)];
      }
      acc += dq::h2f(blk) * a.unit[static_cast<size_t>(sb)] * static_cast<float>(isum) -
             dq::h2f(blk + offsetof(block::Q4_K, dmin)) * a.d[static_cast<size_t>(sb)] * msum;
    }
    return acc;
  }
  if (type == static_cast<uint32_t>(GgmlType::Q6_K)) {
    for (int64_t sb = 0; sb < a.k / 256; ++sb) {
      const uint8_t *blk = row + ggml_block_bytes(GgmlType::Q6_K) * sb, *ql = blk + offsetof(block::Q6_K, ql),
                    *qh = blk + offsetof(block::Q6_K, qh);
      const auto *sc = reinterpret_cast<const int8_t *>(blk + offsetof(block::Q6_K, scales));
      int32_t c[256];
      for (int n = 0; n < 2; ++n)
        for (int l = 0; l < 32; ++l) {
          const uint8_t *l0 = ql + 64 * n, *h0 = qh + 32 * n;
          c[128 * n + l] = (l0[l] & 0x0F) | (((h0[l] >> 0) & 3) << 4);
          c[128 * n + l + 32] = (l0[l + 32] & 0x0F) | (((h0[l] >> 2) & 3) << 4);
          c[128 * n + l + 64] = (l0[l] >> 4) | (((h0[l] >> 4) & 3) << 4);
          c[128 * n + l + 96] = (l0[l + 32] >> 4) | (((h0[l] >> 6) & 3) << 4);
        }
      int64_t isum = 0;
      for (int g = 0; g < 16; ++g) {
        int64_t s = 0;
        for (int i = 0; i < 16; ++i) s += (c[16 * g + i] - 32) * xcode(256 * sb + 16 * g + i);
        isum += sc[g] * s;
      }
      acc += dq::h2f(blk + offsetof(block::Q6_K, d)) * a.unit[static_cast<size_t>(sb)] * static_cast<float>(isum);
    }
    return acc;
  }
  const int64_t bb = block_bytes(type);
  for (int64_t b = 0; b < a.k / 32; ++b) acc += block32_ref(row + b * bb, type, a, b);
  return acc;
}

bool act8_decode(uint32_t type, int64_t k, int *planes) {
  const CpuActivations acts = cpu_activations();
  if (acts == CpuActivations::f32 || !act8_fast() || !act8_type(type) || k % (is_super(type) ? 256 : 32) != 0) return false;
  *planes = acts == CpuActivations::int16 ? 2 : 1;
  return true;
}

void act8_rows(float *out, const Act8 &a, const void *w, uint32_t type, int64_t m) {
  const DotFn dot = dot_for(type, a.planes);
  const int64_t row_bytes = a.k / a.block * block_bytes(type);
  rows_act8(dot, nullptr, out, &a, 1, static_cast<const uint8_t *>(w), type, row_bytes, 0, m, 1);
}

bool matmul_act8(float *out, const float *x, const void *w, uint32_t type, int64_t n, int64_t m, int64_t k,
                 int planes, ThreadPool *pool) {
  const int64_t qk = is_super(type) ? 256 : 32;
  if (!act8_type(type) || k % qk != 0 || n < 1) return false;
  std::vector<Act8> acts(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) act8_quantize(x + t * k, k, type, planes, &acts[static_cast<size_t>(t)]);
  const DotFn dot = dot_for(type, planes);
  const Dot4Fn dot4 = n < 4 ? nullptr : dot4_for(type, planes);
  const int64_t row_bytes = k / qk * block_bytes(type);
  const auto *wb = static_cast<const uint8_t *>(w);
  auto body = [&](int64_t m0, int64_t m1) { rows_act8(dot, dot4, out, acts.data(), n, wb, type, row_bytes, m0, m1, m); };
  if (pool == nullptr || pool->size() <= 1 || n * m * k < tile::kShareMacs) {
    body(0, m);
  } else {
    pool->parallel_for(m, tile::rows_per_item((n + 1) * k), body);  // as matmul_quant's decode dots
  }
  return true;
}

}  // namespace cpu
}  // namespace infokv
