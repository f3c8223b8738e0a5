// Dequantisation entry points and the quantised-weight matmul: out[n, m] = x[n, k] · W[m, k]^T where W is stored in
// ggml blocks. A few weight rows at a time are expanded into a per-work-item f32 buffer (at most 8 * k floats, which
// stays in L1/L2) and multiplied with the tokens by the register-blocked tiles of gemm_tile.hpp; the model's weights
// are never expanded in memory. Decode-sized products of the common types skip the expansion (rows_fused).
#include "kernels/cpu/simd.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/matmul_quant.hpp"
#include "kernels/cpu/gemm_tile.hpp"
#include "kernels/cpu/matmul_act8.hpp"
#include "kernels/cpu/matmul_i16.hpp"
#include "kernels/cpu/kv_rows.hpp"
#include "kernels/thread_pool.hpp"
#include "kernels/ggml_blocks.hpp"
#include "kernels/ggml_types.hpp"
#include "kernels/ops.hpp"

namespace infokv {
namespace cpu {

namespace {

// Quantised products of this many tokens or more take the panels (where the CPU has them): each token's outputs are
// then summed in an order of their own (chunk_invariant_from).
constexpr int64_t kPanelMinTokens = 16;
static_assert(kPanelMinTokens >= kI16MinTokens, "the integer panels serve no count the f32 panels do not");

using BlockFn = void (*)(float *, const uint8_t *);

struct QuantKind {
  BlockFn fn;
  int64_t block_elems;
  int64_t block_bytes;
};

template <GgmlType T>
constexpr QuantKind kind_of(BlockFn fn) { return {fn, ggml_block_elems(T), ggml_block_bytes(T)}; }

bool quant_kind(uint32_t type, QuantKind *out) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::Q4_0: *out = kind_of<GgmlType::Q4_0>(dq::q4_0); return true;
    case GgmlType::Q4_1: *out = kind_of<GgmlType::Q4_1>(dq::q4_1); return true;
    case GgmlType::Q5_0: *out = kind_of<GgmlType::Q5_0>(dq::q5_0); return true;
    case GgmlType::Q5_1: *out = kind_of<GgmlType::Q5_1>(dq::q5_1); return true;
    case GgmlType::Q8_0: *out = kind_of<GgmlType::Q8_0>(dq::q8_0); return true;
    case GgmlType::Q4_K: *out = kind_of<GgmlType::Q4_K>(dq::q4_k); return true;
    case GgmlType::Q5_K: *out = kind_of<GgmlType::Q5_K>(dq::q5_k); return true;
    case GgmlType::Q6_K: *out = kind_of<GgmlType::Q6_K>(dq::q6_k); return true;
    default: return false;
  }
}

// Expands one row of nb blocks. Templated on the block function so each type gets its own inlined, vectorisable loop.
template <BlockFn F, GgmlType T>
inline void expand_row(float *y, const uint8_t *row, int64_t nb) {
  constexpr int64_t QK = ggml_block_elems(T), BB = ggml_block_bytes(T);
  for (int64_t b = 0; b < nb; ++b) F(y + b * QK, row + b * BB);
}

template <BlockFn F, GgmlType T>
void rows_generic(float *out, const float *x, const uint8_t *w, int64_t n, int64_t m0, int64_t m1, int64_t m, int64_t k) {
  constexpr int64_t QK = ggml_block_elems(T), BB = ggml_block_bytes(T);
  std::vector<float> buf(static_cast<size_t>(k));  // this work item's
  const int64_t nb = k / QK;
  for (int64_t r = m0; r < m1; ++r) {
    expand_row<F, T>(buf.data(), w + r * nb * BB, nb);
    for (int64_t t = 0; t < n; ++t) {
      const float *xr = x + t * k;
      float s[4] = {0, 0, 0, 0};
      for (int64_t i = 0; i < k; i += 4)  // k is a multiple of 32
        for (int j = 0; j < 4; ++j) s[j] += xr[i + j] * buf[static_cast<size_t>(i + j)];
      out[t * m + r] = (s[0] + s[1]) + (s[2] + s[3]);
    }
  }
}

using RowsFn = void (*)(float *, const float *, const uint8_t *, int64_t, int64_t, int64_t, int64_t, int64_t);

// The portable products of each type (any CPU; the reference the vector paths are tested against).
RowsFn rows_portable(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::Q4_0: return rows_generic<dq::q4_0, GgmlType::Q4_0>;
    case GgmlType::Q4_1: return rows_generic<dq::q4_1, GgmlType::Q4_1>;
    case GgmlType::Q5_0: return rows_generic<dq::q5_0, GgmlType::Q5_0>;
    case GgmlType::Q5_1: return rows_generic<dq::q5_1, GgmlType::Q5_1>;
    case GgmlType::Q8_0: return rows_generic<dq::q8_0, GgmlType::Q8_0>;
    case GgmlType::Q4_K: return rows_generic<dq::q4_k, GgmlType::Q4_K>;
    case GgmlType::Q5_K: return rows_generic<dq::q5_k, GgmlType::Q5_K>;
    case GgmlType::Q6_K: return rows_generic<dq::q6_k, GgmlType::Q6_K>;
    default: return nullptr;
  }
}

#if IKV_X86
// AVX2 block expansions for the common 32-element types (the scalar ones above remain the reference; these may
// round q * d + m once instead of twice).
IKV_TARGET_AVX2 inline float h2f_f16c(const uint8_t *p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

IKV_TARGET_AVX2 inline void store_u8x16(float *y, __m128i q, __m256 d, __m256 m, bool has_min) {
  __m256 a = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q));
  __m256 b = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(q, 8)));
  _mm256_storeu_ps(y, has_min ? _mm256_fmadd_ps(a, d, m) : _mm256_mul_ps(a, d));
  _mm256_storeu_ps(y + 8, has_min ? _mm256_fmadd_ps(b, d, m) : _mm256_mul_ps(b, d));
}

IKV_TARGET_AVX2 inline void q4_0_avx2(float *y, const uint8_t *b) {
  const __m256 d = _mm256_set1_ps(h2f_f16c(b));
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b + offsetof(block::Q4_0, qs)));
  const __m128i mask = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  // (q - 8) as signed bytes, widened with sign
  const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, mask), eight);
  const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), mask), eight);
  _mm256_storeu_ps(y, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), d));
  _mm256_storeu_ps(y + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), d));
  _mm256_storeu_ps(y + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), d));
  _mm256_storeu_ps(y + 24, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), d));
}

IKV_TARGET_AVX2 inline void q4_1_avx2(float *y, const uint8_t *b) {
  const __m256 d = _mm256_set1_ps(h2f_f16c(b)), m = _mm256_set1_ps(h2f_f16c(b + offsetof(block::Q4_1, m)));
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b + offsetof(block::Q4_1, qs)));
  const __m128i mask = _mm_set1_epi8(0x0F);
  store_u8x16(y, _mm_and_si128(q, mask), d, m, true);
  store_u8x16(y + 16, _mm_and_si128(_mm_srli_epi16(q, 4), mask), d, m, true);
}

IKV_TARGET_AVX2 inline void q8_0_avx2(float *y, const uint8_t *b) {
  const __m256 d = _mm256_set1_ps(h2f_f16c(b));
  for (int j = 0; j < 32; j += 8) {
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(b + offsetof(block::Q8_0, qs) + j));
    _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
  }
}

IKV_TARGET_AVX2 inline void store_i8x16(float *y, __m128i q, float s) {
  const __m256 sv = _mm256_set1_ps(s);
  _mm256_storeu_ps(y, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), sv));
  _mm256_storeu_ps(y + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8))), sv));
}

// One half (128 elements) of a Q6_K super-block as four vectors of 32 unsigned 6-bit values (0 .. 63), in dq::q6_k's
// element order: v[r] holds elements 32r .. 32r + 31 of the half, whose scales are 2r and 2r + 1.
IKV_TARGET_AVX2 inline void q6_bytes(const uint8_t *ql, const uint8_t *qh, __m256i v[4]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
  const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(ql));
  const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(ql + 32));
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(qh));
  v[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(h, m2), 4));
  v[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4));
  v[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4));
  v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4));
}

// Q6_K, 16 values per vector: element 16g + i of the super-block has scale g (see dq::q6_k).
IKV_TARGET_AVX2 inline void q6_k_avx2(float *y, const uint8_t *b) {
  const auto *sc = reinterpret_cast<const int8_t *>(b + offsetof(block::Q6_K, scales));
  const float d = h2f_f16c(b + offsetof(block::Q6_K, d));
  const __m256i off = _mm256_set1_epi8(32);
  for (int n = 0; n < 2; ++n) {
    __m256i v[4];
    q6_bytes(b + offsetof(block::Q6_K, ql) + 64 * n, b + offsetof(block::Q6_K, qh) + 32 * n, v);
    for (int r = 0; r < 4; ++r) {
      const int g = 8 * n + 2 * r;  // the low 16 bytes take scale g, the high 16 scale g + 1
      const __m256i q = _mm256_sub_epi8(v[r], off);
      store_i8x16(y + 16 * g, _mm256_castsi256_si128(q), d * sc[g]);
      store_i8x16(y + 16 * (g + 1), _mm256_extracti128_si256(q, 1), d * sc[g + 1]);
    }
  }
}

// Prefill-sized products (4 tokens or more; fewer take rows_fused): a block of rows at a time (tile::block_rows) is
// expanded into a per-work-item f32 buffer (in L1/L2) once per chunk of tokens, while the next block is fetched into L2,
// and multiplied against the chunk's tokens: through the register-blocked f32 tiles (tile::run_block; x as it is),
// or, with Panels (AVX-512, 16 tokens or more), through tile::run_panels, x already packed into transposed panels of
// tile::kPanel tokens (see tile::pack_panel; packed once per product and shared by the threads; plain k-order sums,
// measured faster than the tiles), in longer chunks (tile::panel_chunk).
template <BlockFn F, GgmlType T, bool Panels>
IKV_TARGET_AVX2 void rows_expanded(float *out, const float *x, const uint8_t *w, int64_t n,
                                                             int64_t m0, int64_t m1, int64_t m, int64_t k) {
  constexpr int64_t QK = ggml_block_elems(T), BB = ggml_block_bytes(T);
  const int64_t rows_per = tile::block_rows(k), nb = k / QK;
  const tile::Scratch64 scratch(rows_per * k);  // this work item's
  float *const buf = scratch.get();
  const int64_t chunk = Panels ? tile::panel_chunk(k) : tile::kTokenChunk;
  for (int64_t tc = 0; tc < n; tc += chunk) {
    const int64_t te = std::min(n, tc + chunk);
    for (int64_t r = m0; r < m1; r += rows_per) {
      const int64_t re = std::min(m1, r + rows_per);
      if (re < m1) tile::prefetch_l2(w + re * nb * BB, (std::min(m1, re + rows_per) - re) * nb * BB);
      for (int64_t i = r; i < re; ++i) expand_row<F, T>(buf + (i - r) * k, w + i * nb * BB, nb);
      if constexpr (Panels) tile::run_panels(out, x + tc * k, tc, te, buf, k, r, re, m, k);
      else tile::run_block<tile::WKind::f32>(out, x, reinterpret_cast<const uint8_t *>(buf), k * 4, r, re, tc, te, m, k);
    }
  }
}

// Decode-sized products (fewer than 4 tokens) skip the row expansion: each block's integers are converted in
// registers and dotted with x directly, and the block's scale (and min, through the block sum of x) is applied
// once per block: dot(x, q*d + m) = d * dot(x, q) + m * sum(x).
enum class Fused { q4_0, q4_1, q8_0, q4_k, q5_0, q5_1, q5_k, q6_k };

constexpr GgmlType fused_type(Fused K) {
  return K == Fused::q4_0 ? GgmlType::Q4_0 : K == Fused::q4_1 ? GgmlType::Q4_1 : K == Fused::q5_0 ? GgmlType::Q5_0
       : K == Fused::q5_1 ? GgmlType::Q5_1 : K == Fused::q4_k ? GgmlType::Q4_K : K == Fused::q5_k ? GgmlType::Q5_K
       : K == Fused::q6_k ? GgmlType::Q6_K : GgmlType::Q8_0;
}

// Bytes of one 32-element block, or of one 256-element super-block for the K types.
constexpr int64_t fused_block_bytes(Fused K) { return ggml_block_bytes(fused_type(K)); }

constexpr bool fused_super(Fused K) { return ggml_block_elems(fused_type(K)) == 256; }

// Where a 32-element block's codes, fifth bits and min start (the K types' layouts are read where they are used).
constexpr int64_t fused_qs(Fused K) { return block::codes_offset(fused_type(K)); }
constexpr int64_t fused_qh(Fused K) { return K == Fused::q5_1 ? offsetof(block::Q5_1, qh) : offsetof(block::Q5_0, qh); }
constexpr int64_t fused_m(Fused K) { return K == Fused::q5_1 ? offsetof(block::Q5_1, m) : offsetof(block::Q4_1, m); }

// Byte i is 0xFF where bit i of the 32 bits at p is set, else 0.
IKV_TARGET_AVX2 inline __m256i bytes_from_bits32(const uint8_t *p) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  // byte i takes byte i / 8 of the word, then every bit but bit i % 8 is set: all ones exactly where bit i was set
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
  const __m256i others = _mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_cmpeq_epi8(others, _mm256_set1_epi64x(-1));
}

// A Q5_0/Q5_1 block's 32 five-bit values as bytes, in element order: the low nibbles of qs are elements 0..15, the
// high nibbles 16..31, and bit j of qh is element j's fifth bit (see dq::q5_0).
IKV_TARGET_AVX2 inline __m256i q5_bytes(const uint8_t *qh, const uint8_t *qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i *>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m256i nib = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), mask), _mm_and_si128(q, mask));
  return _mm256_or_si256(nib, _mm256_and_si256(bytes_from_bits32(qh), _mm256_set1_epi8(0x10)));
}

// Eight bytes (the low half of b), signed or not, as eight floats.
template <bool Signed>
IKV_TARGET_AVX2 inline __m256 widen_bytes8(__m128i b) {
  return _mm256_cvtepi32_ps(Signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b));
}

// 32 bytes (16 in lo, 16 in hi), signed or not, as four vectors of eight floats in order.
template <bool Signed>
IKV_TARGET_AVX2 inline void widen_bytes32(__m128i lo, __m128i hi, __m256 &q0, __m256 &q1,
                                                                   __m256 &q2, __m256 &q3) {
  q0 = widen_bytes8<Signed>(lo);
  q1 = widen_bytes8<Signed>(_mm_srli_si128(lo, 8));
  q2 = widen_bytes8<Signed>(hi);
  q3 = widen_bytes8<Signed>(_mm_srli_si128(hi, 8));
}

template <Fused K>
IKV_TARGET_AVX2 float dot_fused(const uint8_t *row, const float *x, const float *sx, int64_t nb) {
  constexpr int64_t BB = fused_block_bytes(K);
  __m256 acc = _mm256_setzero_ps();
  float acc_min = 0.0f;
  const __m128i mask = _mm_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b, row += BB, x += 32) {
    __m256 q0, q1, q2, q3;
    if constexpr (K == Fused::q8_0) {
      const uint8_t *q = row + fused_qs(K);
      q0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(q))));
      q1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(q + 8))));
      q2 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(q + 16))));
      q3 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(q + 24))));
    } else if constexpr (K == Fused::q5_0 || K == Fused::q5_1) {
      __m256i v = q5_bytes(row + fused_qh(K), row + fused_qs(K));
      if constexpr (K == Fused::q5_0) v = _mm256_sub_epi8(v, _mm256_set1_epi8(16));  // -16 .. 15
      widen_bytes32<K == Fused::q5_0>(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1), q0, q1, q2, q3);
    } else {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i *>(row + fused_qs(K)));
      widen_bytes32<false>(_mm_and_si128(q, mask), _mm_and_si128(_mm_srli_epi16(q, 4), mask), q0, q1, q2, q3);
    }
    __m256 p = _mm256_mul_ps(q0, _mm256_loadu_ps(x));
    p = _mm256_fmadd_ps(q1, _mm256_loadu_ps(x + 8), p);
    p = _mm256_fmadd_ps(q2, _mm256_loadu_ps(x + 16), p);
    p = _mm256_fmadd_ps(q3, _mm256_loadu_ps(x + 24), p);
    const float d = h2f_f16c(row);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), p, acc);
    if constexpr (K == Fused::q4_1 || K == Fused::q5_1) acc_min += h2f_f16c(row + fused_m(K)) * sx[b];
    if constexpr (K == Fused::q4_0) acc_min -= 8.0f * d * sx[b];
  }
  return tile::hsum(acc) + acc_min;
}

// The same products with 16-wide vectors where the CPU has AVX-512 (cpu_has_avx512): decode at one thread is bound
// by the instructions that widen the weights, not by memory, and these need half as many. Two blocks per step, each
// with its own accumulators, so the block-to-block additions are not one long dependency chain. Its sums are in
// another order than dot_fused's, so the two paths differ in the last bits (each is deterministic on its own).

template <Fused K>
IKV_TARGET_AVX512 inline __m512 block_dot512(const uint8_t *blk, const float *x) {
  __m512 q0, q1;
  if constexpr (K == Fused::q8_0) {
    const uint8_t *qs = blk + fused_qs(K);
    q0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(qs))));
    q1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(qs + 16))));
  } else if constexpr (K == Fused::q5_0 || K == Fused::q5_1) {
    const __m256i v = q5_bytes(blk + fused_qh(K), blk + fused_qs(K));
    const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    if constexpr (K == Fused::q5_0) {  // -16 .. 15
      const __m512i sixteen = _mm512_set1_epi32(16);
      q0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(lo), sixteen));
      q1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(hi), sixteen));
    } else {
      q0 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo));
      q1 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi));
    }
  } else {
    // byte j widened to 32 bits holds element j in its low nibble and element 16 + j above it
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(blk + fused_qs(K))));
    __m512i lo = _mm512_and_si512(v, _mm512_set1_epi32(0x0F)), hi = _mm512_srli_epi32(v, 4);
    if constexpr (K == Fused::q4_0) {  // -8 .. 7
      lo = _mm512_sub_epi32(lo, _mm512_set1_epi32(8));
      hi = _mm512_sub_epi32(hi, _mm512_set1_epi32(8));
    }
    q0 = _mm512_cvtepi32_ps(lo);
    q1 = _mm512_cvtepi32_ps(hi);
  }
  return _mm512_fmadd_ps(q1, _mm512_loadu_ps(x + 16), _mm512_mul_ps(q0, _mm512_loadu_ps(x)));
}

// A Q4_1/Q5_1 block's d and m (the f16 pair it starts with) as [d, m, 0, 0].
IKV_TARGET_AVX512 inline __m128 dm_of(const uint8_t *blk) {
  int32_t w;
  std::memcpy(&w, blk, 4);
  return _mm_cvtph_ps(_mm_cvtsi32_si128(w));
}

template <Fused K>
IKV_TARGET_AVX512 float dot_fused512(const uint8_t *row, const float *x, const float *sx, int64_t nb) {
  constexpr int64_t BB = fused_block_bytes(K);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  if constexpr (K == Fused::q4_1 || K == Fused::q5_1) {
    // d and m side by side, converted by one instruction (dm_of); lane 1 of mn sums m * sum(x)
    __m128 mn0 = _mm_setzero_ps(), mn1 = _mm_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2, row += 2 * BB, x += 64) {
      const __m128 dm0 = dm_of(row), dm1 = dm_of(row + BB);
      acc0 = _mm512_fmadd_ps(_mm512_broadcastss_ps(dm0), block_dot512<K>(row, x), acc0);
      acc1 = _mm512_fmadd_ps(_mm512_broadcastss_ps(dm1), block_dot512<K>(row + BB, x + 32), acc1);
      mn0 = _mm_fmadd_ps(dm0, _mm_broadcast_ss(sx + b), mn0);
      mn1 = _mm_fmadd_ps(dm1, _mm_broadcast_ss(sx + b + 1), mn1);
    }
    if (b < nb) {
      const __m128 dm0 = dm_of(row);
      acc0 = _mm512_fmadd_ps(_mm512_broadcastss_ps(dm0), block_dot512<K>(row, x), acc0);
      mn0 = _mm_fmadd_ps(dm0, _mm_broadcast_ss(sx + b), mn0);
    }
    const float mins = _mm_cvtss_f32(_mm_movehdup_ps(_mm_add_ps(mn0, mn1)));
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + mins;
  }
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2, row += 2 * BB, x += 64) {
    acc0 = _mm512_fmadd_ps(_mm512_set1_ps(h2f_f16c(row)), block_dot512<K>(row, x), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_set1_ps(h2f_f16c(row + BB)), block_dot512<K>(row + BB, x + 32), acc1);
  }
  if (b < nb) acc0 = _mm512_fmadd_ps(_mm512_set1_ps(h2f_f16c(row)), block_dot512<K>(row, x), acc0);
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

// dot of 32 unsigned bytes with x[32]
IKV_TARGET_AVX2 inline __m256 dot32_u8(__m256i v, const float *xx) {
  const __m128i a = _mm256_castsi256_si128(v), b = _mm256_extracti128_si256(v, 1);
  __m256 p = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(a)), _mm256_loadu_ps(xx));
  p = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(a, 8))), _mm256_loadu_ps(xx + 8), p);
  p = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)), _mm256_loadu_ps(xx + 16), p);
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(b, 8))), _mm256_loadu_ps(xx + 24), p);
}

// Sub-blocks 2j and 2j + 1 of a Q4_K/Q5_K super-block as 32 unsigned bytes each (lo, hi), from the 32 bytes of qs
// at q; for Q5_K, bits 0 and 1 of every byte of hb become bit 4 of lo and hi, and hb moves on by 2 bits for the next j.
template <bool Five>
IKV_TARGET_AVX2 inline void k4_bytes(const uint8_t *q, __m256i &hb, __m256i &lo, __m256i &hi) {
  const __m256i mask = _mm256_set1_epi8(0x0F);
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(q));
  lo = _mm256_and_si256(v, mask);
  hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
  if constexpr (Five) {
    lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(1)), 4));
    hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(2)), 3));
    hb = _mm256_srli_epi16(hb, 2);
  }
}

// Q4_K and Q5_K: 8 sub-blocks of 32 per super-block, each with its own 6-bit scale and min:
// dot(x, d*sc*q - dmin*m) = d*sc * dot(x, q) - dmin*m * sum(x) per sub-block. sx holds the 32-element sums of x.
// Q5_K adds a fifth bit per element: bit 2j of qh[l] belongs to element 64j + l, bit 2j + 1 to 64j + 32 + l.
template <bool Five>
IKV_TARGET_AVX2 float dot_fused_k4(const uint8_t *row, const float *x, const float *sx, int64_t nb32) {
  constexpr int64_t BB = fused_block_bytes(Five ? Fused::q5_k : Fused::q4_k);
  constexpr int64_t QS = Five ? offsetof(block::Q5_K, qs) : offsetof(block::Q4_K, qs);
  __m256 acc = _mm256_setzero_ps();
  float acc_min = 0.0f;
  for (int64_t sb = 0; sb < nb32 / 8; ++sb, row += BB) {
    const float d = h2f_f16c(row), dmin = h2f_f16c(row + offsetof(block::Q4_K, dmin));
    const uint8_t *scales = row + offsetof(block::Q4_K, scales), *qs = row + QS;
    __m256i hb = Five ? _mm256_loadu_si256(reinterpret_cast<const __m256i *>(row + offsetof(block::Q5_K, qh)))
                      : _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j, x += 64, sx += 2) {
      float d1, m1, d2, m2;
      dq::pair_scales_k4(2 * j, scales, d, dmin, &d1, &m1, &d2, &m2);
      __m256i lo, hi;
      k4_bytes<Five>(qs + 32 * j, hb, lo, hi);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(d1), dot32_u8(lo, x), acc);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(d2), dot32_u8(hi, x + 32), acc);
      acc_min -= m1 * sx[0] + m2 * sx[1];
    }
  }
  return tile::hsum(acc) + acc_min;
}

// Q6_K: 16 sub-blocks of 16 values (q6 - 32), each with a signed 8-bit scale times d; the element order is
// dq::q6_k's (q6_bytes): in each half of 128, vector r holds elements 32r .. 32r + 31, scales 2r and 2r + 1.
IKV_TARGET_AVX2 float dot_fused_q6k(const uint8_t *row, const float *x, int64_t nb32) {
  __m256 acc_a = _mm256_setzero_ps(), acc_b = _mm256_setzero_ps();
  const __m256i off = _mm256_set1_epi8(32);
  for (int64_t sb = 0; sb < nb32 / 8; ++sb, row += fused_block_bytes(Fused::q6_k)) {
    const auto *sc = reinterpret_cast<const int8_t *>(row + offsetof(block::Q6_K, scales));
    const float d = h2f_f16c(row + offsetof(block::Q6_K, d));
    for (int n = 0; n < 2; ++n, x += 128) {
      __m256i v[4];
      q6_bytes(row + offsetof(block::Q6_K, ql) + 64 * n, row + offsetof(block::Q6_K, qh) + 32 * n, v);
      for (int r = 0; r < 4; ++r) {
        const __m256i s = _mm256_sub_epi8(v[r], off);  // -32 .. 31
        __m256 q0, q1, q2, q3;
        widen_bytes32<true>(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1), q0, q1, q2, q3);
        const float *xx = x + 32 * r;
        const __m256 pa = _mm256_fmadd_ps(q1, _mm256_loadu_ps(xx + 8), _mm256_mul_ps(q0, _mm256_loadu_ps(xx)));
        const __m256 pb = _mm256_fmadd_ps(q3, _mm256_loadu_ps(xx + 24), _mm256_mul_ps(q2, _mm256_loadu_ps(xx + 16)));
        acc_a = _mm256_fmadd_ps(_mm256_set1_ps(d * sc[8 * n + 2 * r]), pa, acc_a);
        acc_b = _mm256_fmadd_ps(_mm256_set1_ps(d * sc[8 * n + 2 * r + 1]), pb, acc_b);
      }
    }
  }
  return tile::hsum(_mm256_add_ps(acc_a, acc_b));
}

// dot of 32 unsigned bytes with x[32], 16 lanes wide
IKV_TARGET_AVX512 inline __m512 dot32_u8_512(__m256i v, const float *xx) {
  const __m512 a = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(v)));
  const __m512 b = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(v, 1)));
  return _mm512_fmadd_ps(b, _mm512_loadu_ps(xx + 16), _mm512_mul_ps(a, _mm512_loadu_ps(xx)));
}

// dot_fused_k4 with 16-wide vectors (AVX-512); the two sub-blocks of each 64 have their own accumulators.
template <bool Five>
IKV_TARGET_AVX512 float dot_fused_k4_512(const uint8_t *row, const float *x, const float *sx, int64_t nb32) {
  constexpr int64_t BB = fused_block_bytes(Five ? Fused::q5_k : Fused::q4_k);
  constexpr int64_t QS = Five ? offsetof(block::Q5_K, qs) : offsetof(block::Q4_K, qs);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  float acc_min = 0.0f;
  for (int64_t sb = 0; sb < nb32 / 8; ++sb, row += BB) {
    const float d = h2f_f16c(row), dmin = h2f_f16c(row + offsetof(block::Q4_K, dmin));
    const uint8_t *scales = row + offsetof(block::Q4_K, scales), *qs = row + QS;
    __m256i hb = Five ? _mm256_loadu_si256(reinterpret_cast<const __m256i *>(row + offsetof(block::Q5_K, qh)))
                      : _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j, x += 64, sx += 2) {
      float d1, m1, d2, m2;
      dq::pair_scales_k4(2 * j, scales, d, dmin, &d1, &m1, &d2, &m2);
      __m256i lo, hi;
      k4_bytes<Five>(qs + 32 * j, hb, lo, hi);
      acc0 = _mm512_fmadd_ps(_mm512_set1_ps(d1), dot32_u8_512(lo, x), acc0);
      acc1 = _mm512_fmadd_ps(_mm512_set1_ps(d2), dot32_u8_512(hi, x + 32), acc1);
      acc_min -= m1 * sx[0] + m2 * sx[1];
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + acc_min;
}

// dot_fused_q6k with 16-wide vectors (AVX-512): one vector per sub-block of 16, so each takes its own scale.
IKV_TARGET_AVX512 float dot_fused_q6k_512(const uint8_t *row, const float *x, int64_t nb32) {
  __m512 acc_a = _mm512_setzero_ps(), acc_b = _mm512_setzero_ps();
  const __m256i off = _mm256_set1_epi8(32);
  for (int64_t sb = 0; sb < nb32 / 8; ++sb, row += fused_block_bytes(Fused::q6_k)) {
    const auto *sc = reinterpret_cast<const int8_t *>(row + offsetof(block::Q6_K, scales));
    const float d = h2f_f16c(row + offsetof(block::Q6_K, d));
    for (int n = 0; n < 2; ++n, x += 128) {
      __m256i v[4];
      q6_bytes(row + offsetof(block::Q6_K, ql) + 64 * n, row + offsetof(block::Q6_K, qh) + 32 * n, v);
      for (int r = 0; r < 4; ++r) {
        const __m256i s = _mm256_sub_epi8(v[r], off);  // -32 .. 31
        const float *xx = x + 32 * r;
        const __m512 qa = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(s)));
        const __m512 qb = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(s, 1)));
        acc_a = _mm512_fmadd_ps(_mm512_set1_ps(d * sc[8 * n + 2 * r]), _mm512_mul_ps(qa, _mm512_loadu_ps(xx)), acc_a);
        acc_b = _mm512_fmadd_ps(_mm512_set1_ps(d * sc[8 * n + 2 * r + 1]), _mm512_mul_ps(qb, _mm512_loadu_ps(xx + 16)), acc_b);
      }
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc_a, acc_b));
}

template <Fused K, bool Wide = false>
IKV_TARGET_AVX2 void rows_fused(float *out, const float *x, const uint8_t *w, int64_t n,
                                                         int64_t m0, int64_t m1, int64_t m, int64_t k) {
  const int64_t row_bytes = k / (fused_super(K) ? 256 : 32) * fused_block_bytes(K);
  const int64_t nb = k / 32;
  const tile::Scratch64 sums_(n * nb);  // this work item's; every entry is written below where it is read
  float *const sums = sums_.get();
  // the types with a min (or the AVX2 q4_0's offset) use the 32-element sums of x
  constexpr bool kSums = K == Fused::q4_1 || K == Fused::q5_1 || K == Fused::q4_k || K == Fused::q5_k ||
                         (K == Fused::q4_0 && !Wide);
  // Each sum is eight chains l[i] = x[i] + x[i + 8] + x[i + 16] + x[i + 24] (one vector), then
  // ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), in vectors: scalar loops compile to stores and reloads, which
  // cost decode time (packaging/docs/performance.md, "Kernel choices").
  if (kSums)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t b = 0; b < nb; ++b) {
        const float *xb = x + t * k + b * 32;
        __m256 l = _mm256_add_ps(_mm256_setzero_ps(), _mm256_loadu_ps(xb));
        l = _mm256_add_ps(l, _mm256_loadu_ps(xb + 8));
        l = _mm256_add_ps(l, _mm256_loadu_ps(xb + 16));
        l = _mm256_add_ps(l, _mm256_loadu_ps(xb + 24));
        const __m128 y = _mm_add_ps(_mm256_castps256_ps128(l), _mm256_extractf128_ps(l, 1));  // l_i + l_{i+4}
        const __m128 h = _mm_add_ps(y, _mm_movehl_ps(y, y));                                    // [y0 + y2, y1 + y3]
        sums[static_cast<size_t>(t * nb + b)] = _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
      }
  // each row's bytes are asked for tile::fused_ahead() bytes before they are read (see tile::prefetch_l1)
  const int64_t ahead_bytes = tile::fused_ahead();
  for (int64_t r = m0; r < m1; ++r) {
    const int64_t ahead = r * row_bytes + ahead_bytes;
    tile::prefetch_l1(w, ahead, std::min(m1 * row_bytes, ahead + row_bytes));
    for (int64_t t = 0; t < n; ++t) {
      const uint8_t *wr = w + r * row_bytes;
      const float *xt = x + t * k, *st = sums + t * nb;
      if constexpr ((K == Fused::q4_k || K == Fused::q5_k) && Wide) out[t * m + r] = dot_fused_k4_512<K == Fused::q5_k>(wr, xt, st, nb);
      else if constexpr (K == Fused::q4_k || K == Fused::q5_k) out[t * m + r] = dot_fused_k4<K == Fused::q5_k>(wr, xt, st, nb);
      else if constexpr (K == Fused::q6_k && Wide) out[t * m + r] = dot_fused_q6k_512(wr, xt, nb);
      else if constexpr (K == Fused::q6_k) out[t * m + r] = dot_fused_q6k(wr, xt, nb);
      else if constexpr (Wide) out[t * m + r] = dot_fused512<K>(wr, xt, st, nb);
      else out[t * m + r] = dot_fused<K>(wr, xt, st, nb);
    }
  }
}

template <Fused K>
RowsFn fused_rows(bool wide) {
  return wide ? rows_fused<K, true> : rows_fused<K, false>;
}

// The expanded products of each type, through the tiles (Panels false) or the panels (true).
template <bool Panels>
RowsFn expanded_for(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::Q4_0: return rows_expanded<q4_0_avx2, GgmlType::Q4_0, Panels>;
    case GgmlType::Q4_1: return rows_expanded<q4_1_avx2, GgmlType::Q4_1, Panels>;
    case GgmlType::Q5_0: return rows_expanded<dq::q5_0, GgmlType::Q5_0, Panels>;
    case GgmlType::Q5_1: return rows_expanded<dq::q5_1, GgmlType::Q5_1, Panels>;
    case GgmlType::Q8_0: return rows_expanded<q8_0_avx2, GgmlType::Q8_0, Panels>;
    case GgmlType::Q4_K: return rows_expanded<dq::q4_k, GgmlType::Q4_K, Panels>;
    case GgmlType::Q5_K: return rows_expanded<dq::q5_k, GgmlType::Q5_K, Panels>;
    case GgmlType::Q6_K: return rows_expanded<q6_k_avx2, GgmlType::Q6_K, Panels>;
    default: return nullptr;
  }
}

RowsFn rows_for(uint32_t type) { return cpu_has_avx2_fma_f16c() ? expanded_for<false>(type) : rows_portable(type); }

RowsFn panels_for(uint32_t type) { return expanded_for<true>(type); }
#else
RowsFn rows_for(uint32_t type) { return rows_portable(type); }
#endif  // IKV_X86

}  // namespace

bool weight_type_supported(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: return true;
    default: {
      QuantKind q;
      return quant_kind(type, &q);
    }
  }
}

bool dequantize(float *out, const void *src, uint32_t type, int64_t n) {
  const auto *s = static_cast<const uint8_t *>(src);
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::F32: std::memcpy(out, s, static_cast<size_t>(n) * 4); return true;
    case GgmlType::F16:
    case GgmlType::BF16: {  // exact widening, F16C where the CPU has it (an embedding row per prompt token)
      const KvDtype t = type == static_cast<uint32_t>(GgmlType::F16) ? KvDtype::f16 : KvDtype::bf16;
      constexpr int64_t kChunk = int64_t{1} << 20;
      for (int64_t i = 0; i < n; i += kChunk)
        load_row(out + i, s + 2 * i, static_cast<int32_t>(std::min(kChunk, n - i)), t);
      return true;
    }
    default: break;
  }
  QuantKind q;
  if (!quant_kind(type, &q) || n % q.block_elems != 0) return false;
  for (int64_t b = 0; b < n / q.block_elems; ++b) q.fn(out + b * q.block_elems, s + b * q.block_bytes);
  return true;
}

bool dequantize_f16(uint16_t *out, const void *src, uint32_t type, int64_t n) {
  QuantKind q;
  if (!quant_kind(type, &q) || n % q.block_elems != 0) return false;
  const auto *s = static_cast<const uint8_t *>(src);
  float y[256];
  for (int64_t b = 0; b < n / q.block_elems; ++b) {
    q.fn(y, s + b * q.block_bytes);
    for (int64_t i = 0; i < q.block_elems; ++i) out[b * q.block_elems + i] = float_to_fp16(y[i]);
  }
  return true;
}

namespace {
thread_local bool tl_rows_independent = false;
}  // namespace

RowsIndependent::RowsIndependent(bool on) : prev_(tl_rows_independent) { tl_rows_independent = on; }
RowsIndependent::~RowsIndependent() { tl_rows_independent = prev_; }
bool rows_independent() { return tl_rows_independent; }

bool matmul_quant(float *out, const float *x, const void *w, uint32_t w_type, int64_t n, int64_t m, int64_t k,
                  ThreadPool *pool) {
  RowsFn fn = rows_for(w_type);
  QuantKind q;
  if (fn == nullptr || !quant_kind(w_type, &q) || k % q.block_elems != 0) return false;
  // Decode with integer activations where chosen and the CPU has the integer dot products: each token's row is
  // quantised and dotted on its own. Fewer than 4 tokens; in a decode batch of several sequences (RowsIndependent
  // on), fewer than kRowsIndependentTokens, so that a sequence decoded in such a batch gets the logits it gets alone.
  int planes = 0;
  const int64_t act8_tokens = rows_independent() ? kRowsIndependentTokens : 4;
  if (n < act8_tokens && act8_decode(w_type, k, &planes)) return matmul_act8(out, x, w, w_type, n, m, k, planes, pool);
  // Prefill-sized products with integer activations where chosen and the CPU has the integer dot products (every
  // token's outputs depend on that token alone, as in the f32 panels they replace).
  int32_t qmax = 0;
  if (i16_prefill(w_type, n, k, &qmax)) return matmul_i16(out, x, w, w_type, n, m, k, qmax, pool);
#if IKV_X86
  if (n < 4 && cpu_has_avx2_fma_f16c()) {
    const bool wide = cpu_has_avx512();
    switch (static_cast<GgmlType>(w_type)) {
      case GgmlType::Q4_0: fn = fused_rows<Fused::q4_0>(wide); break;
      case GgmlType::Q4_1: fn = fused_rows<Fused::q4_1>(wide); break;
      case GgmlType::Q8_0: fn = fused_rows<Fused::q8_0>(wide); break;
      case GgmlType::Q4_K: fn = fused_rows<Fused::q4_k>(wide); break;
      case GgmlType::Q5_0: fn = fused_rows<Fused::q5_0>(wide); break;
      case GgmlType::Q5_1: fn = fused_rows<Fused::q5_1>(wide); break;
      case GgmlType::Q5_K: fn = fused_rows<Fused::q5_k>(wide); break;
      case GgmlType::Q6_K: fn = fused_rows<Fused::q6_k>(wide); break;
      default: break;
    }
  }
#endif
  const auto *wb = static_cast<const uint8_t *>(w);
  const bool pool_on = pool != nullptr && pool->size() > 1 && n * m * k >= tile::kShareMacs;
  // Rows per work item for nt tokens: expanding a row costs about as much as a few token dots, so count it as one
  // more token.
  auto grain = [k](int64_t nt) { return tile::rows_per_item((nt + 1) * k); };
#if IKV_X86
  const bool panels = cpu_has_avx512();
  if (n >= kPanelMinTokens && panels) {
    // tokens kPanelSpan at a time: packed into transposed panels (shared by the threads), then every row over them
    fn = panels_for(w_type);
    constexpr int64_t kPanelSpan = 512;
    const tile::Scratch64 scratch(std::min(n, kPanelSpan) * k + tile::kPanel * k);  // this product's
    float *const xt = scratch.get();
    for (int64_t s = 0; s < n; s += kPanelSpan) {
      const int64_t ns = std::min(kPanelSpan, n - s), np = (ns + tile::kPanel - 1) / tile::kPanel;
      auto pack = [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p)
          tile::pack_panel(xt + p * tile::kPanel * k, x + s * k, p * tile::kPanel, std::min(ns, (p + 1) * tile::kPanel), k);
      };
      auto body = [&](int64_t m0, int64_t m1) { fn(out + s * m, xt, wb, ns, m0, m1, m, k); };
      if (!pool_on) {
        pack(0, np);
        body(0, m);
      } else {
        pool->parallel_for(np, 1, pack);
        pool->parallel_for(m, grain(ns), body);
      }
    }
    return true;
  }
#endif
  auto body = [&](int64_t m0, int64_t m1) { fn(out, x, wb, n, m0, m1, m, k); };
  if (!pool_on) {
    body(0, m);
  } else {
    pool->parallel_for(m, grain(n), body);
  }
  return true;
}

int64_t chunk_invariant_from() {
#if IKV_X86
  const bool panels = cpu_has_avx512();
  return panels ? kPanelMinTokens : 0;
#else
  return 0;
#endif
}

}  // namespace cpu
}  // namespace infokv
