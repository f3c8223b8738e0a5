// Slot addressing and row conversion of the paged KV layout, shared by the CPU KV-cache and attention kernels.
#pragma once
#include "kernels/cpu/simd.hpp"

#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/fp16.hpp"
#include "kernels/kv_quant.hpp"
#include "kernels/paged_kv.hpp"

namespace infokv {
namespace cpu {

// Address of slot `slot` of kv head h, K (which = 0) or V (which = 1), through the view's block table.
inline uint8_t *slot_ptr(const PagedKv &kv, int32_t slot, int32_t h, int which) {
  const int32_t b = kv.block_table[slot / kv.block_size];
  const int32_t s = slot % kv.block_size;
  const int64_t off = ((static_cast<int64_t>(which) * kv.n_kv_heads + h) * kv.block_size + s) * kv_bytes(kv.dtype, kv.head_dim);
  return kv.pool + static_cast<int64_t>(b) * kv.block_stride + off;
}

#if IKV_X86
IKV_TARGET_AVX2 inline void load_f16_hw(float *dst, const uint16_t *s, int32_t n) {
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(s + i))));
  for (; i < n; ++i) dst[i] = fp16_to_float(s[i]);
}
#endif

#if IKV_X86
// F16C's conversion rounds to nearest even like float_to_fp16, and gives the same bits for every float but NaN
// (checked over all 2^32 inputs): it keeps a NaN's payload where float_to_fp16 gives the plain quiet NaN, so a block
// holding a NaN goes through float_to_fp16.
IKV_TARGET_AVX2 inline void store_f16_hw(uint16_t *d, const float *s, int32_t n) {
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(s + i);
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    if (_mm256_testz_ps(nan, nan)) {
      _mm_storeu_si128(reinterpret_cast<__m128i *>(d + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    } else {
      for (int32_t j = i; j < i + 8; ++j) d[j] = float_to_fp16(s[j]);
    }
  }
  for (; i < n; ++i) d[i] = float_to_fp16(s[i]);
}

// q8_0 blocks widened with AVX2, in the rotated basis: the same products as kvq::dequantize_q8_0_rotated (an int8
// times an f16 scale is exact in f32), eight at a time.
IKV_TARGET_AVX2 inline void load_q8_0_hw(float *dst, const uint8_t *b, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, b += kvq::kQ8Bytes, dst += kvq::kBlock) {
    const __m256 d = _mm256_set1_ps(kvq::scale_of(b));
    for (int j = 0; j < kvq::kBlock; j += 8) {
      const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(b + 2 + j)));
      _mm256_storeu_ps(dst + j, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
    }
  }
}

// The same, sixteen at a time (AVX-512): half the instructions, which is what widening a q8_0 block costs next to an
// f16 one's (vcvtph2ps inside the products).
IKV_TARGET_AVX512 inline void load_q8_0_512(float *dst, const uint8_t *b, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, b += kvq::kQ8Bytes, dst += kvq::kBlock) {
    const __m512 d = _mm512_set1_ps(kvq::scale_of(b));
    const __m512i q0 = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b + 2)));
    const __m512i q1 = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b + 18)));
    _mm512_storeu_ps(dst, _mm512_mul_ps(_mm512_cvtepi32_ps(q0), d));
    _mm512_storeu_ps(dst + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(q1), d));
  }
}

// q4_0 blocks widened with AVX2, in the rotated basis: kvq::dequantize_q4_0_rotated's products ((q - 8) times an
// f16 scale is exact in f32), eight at a time.
IKV_TARGET_AVX2 inline void load_q4_0_hw(float *dst, const uint8_t *b, int64_t n_blocks) {
  const __m128i low = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  for (int64_t i = 0; i < n_blocks; ++i, b += kvq::kQ4Bytes, dst += kvq::kBlock) {
    const __m256 d = _mm256_set1_ps(kvq::scale_of(b));
    const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b + 2));
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(qs, low), eight);                     // elements 0..15
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), low), eight);  // elements 16..31
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int j = 0; j < 4; ++j)
      _mm256_storeu_ps(dst + 8 * j, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[j])), d));
  }
}

#endif  // IKV_X86

// n floats stored as dtype t at dst (round to nearest even; the quantised dtypes take whole blocks, n a multiple of
// kKvQuantBlock).
inline void store_row(uint8_t *dst, const float *src, int32_t n, KvDtype t) {
  switch (t) {
    case KvDtype::f32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); break;
    case KvDtype::f16: {
      auto *d = reinterpret_cast<uint16_t *>(dst);
#if IKV_X86
      if (cpu_has_avx2_fma_f16c()) {
        store_f16_hw(d, src, n);
        break;
      }
#endif
      for (int32_t i = 0; i < n; ++i) d[i] = float_to_fp16(src[i]);
      break;
    }
    case KvDtype::bf16: {
      auto *d = reinterpret_cast<uint16_t *>(dst);
      for (int32_t i = 0; i < n; ++i) d[i] = float_to_bf16(src[i]);
      break;
    }
    case KvDtype::q8_0:
      for (int32_t i = 0; i < n; i += kvq::kBlock, dst += kvq::kQ8Bytes) kvq::quantize_q8_0(dst, src + i);
      break;
    case KvDtype::q4_0:
      for (int32_t i = 0; i < n; i += kvq::kBlock, dst += kvq::kQ4Bytes) kvq::quantize_q4_0(dst, src + i);
      break;
  }
}

// Row of n elements of a quantised dtype t at src, as f32 in the rotated basis (kernels/kv_quant.hpp): what attention
// reads, with rotated queries. A float dtype's row as it is.
inline void load_row(float *dst, const uint8_t *src, int32_t n, KvDtype t);
inline void load_row_rotated(float *dst, const uint8_t *src, int32_t n, KvDtype t) {
  if (t == KvDtype::q8_0) {
#if IKV_X86
    if (cpu_has_avx512()) {
      load_q8_0_512(dst, src, n / kvq::kBlock);
      return;
    }
    if (cpu_has_avx2_fma_f16c()) {
      load_q8_0_hw(dst, src, n / kvq::kBlock);
      return;
    }
#endif
    for (int32_t i = 0; i < n; i += kvq::kBlock, src += kvq::kQ8Bytes) kvq::dequantize_q8_0_rotated(dst + i, src);
  } else if (t == KvDtype::q4_0) {
#if IKV_X86
    if (cpu_has_avx2_fma_f16c()) {
      load_q4_0_hw(dst, src, n / kvq::kBlock);
      return;
    }
#endif
    for (int32_t i = 0; i < n; i += kvq::kBlock, src += kvq::kQ4Bytes) kvq::dequantize_q4_0_rotated(dst + i, src);
  } else {
    load_row(dst, src, n, t);
  }
}

// Row of n elements of dtype t at src, as f32.
inline void load_row(float *dst, const uint8_t *src, int32_t n, KvDtype t) {
  switch (t) {
    case KvDtype::f32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); break;
    case KvDtype::f16: {
      const auto *s = reinterpret_cast<const uint16_t *>(src);
#if IKV_X86
      if (cpu_has_avx2_fma_f16c()) {
        load_f16_hw(dst, s, n);
        break;
      }
#endif
      for (int32_t i = 0; i < n; ++i) dst[i] = fp16_to_float(s[i]);
      break;
    }
    case KvDtype::bf16: {
      const auto *s = reinterpret_cast<const uint16_t *>(src);
      for (int32_t i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i]);
      break;
    }
    case KvDtype::q8_0:
    case KvDtype::q4_0:
      load_row_rotated(dst, src, n, t);
      for (int32_t i = 0; i < n; i += kvq::kBlock) kvq::unrotate32(dst + i);
      break;
  }
}

// Queries (or any rows) rotated like a quantised cache's blocks, in place: n a multiple of kKvQuantBlock.
inline void rotate_rows(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i += kvq::kBlock) kvq::rotate32(x + i, x + i);
}
inline void unrotate_rows(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i += kvq::kBlock) kvq::unrotate32(x + i);
}

}  // namespace cpu
}  // namespace infokv
