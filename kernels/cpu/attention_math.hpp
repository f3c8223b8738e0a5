// The arithmetic of CPU attention (paged_attention.cpp): softmax pieces, a block's scores for a group of query heads
// and the weighted sum of its values, each in AVX2 (reading f32, f16 or bf16 K/V directly) and portably. Internal
// to kernels/cpu. Every score is one FMA chain over 8-wide chunks then one lane reduction, and every output element
// one FMA per key in key order, whatever the blocking: callers rely on that for bit-identical results across tiles.
#pragma once
#include "kernels/cpu/simd.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/exp_avx2.hpp"
#include "kernels/cpu/gemm_tile.hpp"
#include "kernels/cpu/kv_rows.hpp"
#include "kernels/fp16.hpp"

namespace infokv {
namespace cpu {
namespace attn {

// A weighted sum's row (wsum_rows_*): o += w[j] * v[j] for j < cnt.
struct WsumRow {
  float *o;
  const float *w;
  int32_t cnt;
};
constexpr int kWsumRows = 4;

// One row of scores: query q (head_dim floats) against keys 0 .. cnt-1 of a block, out[j] = (q . k_j) * scale.
struct ScoreRow {
  float *out;
  const float *q;
  int32_t cnt;
};
constexpr int kScoreRows = 4;
constexpr int32_t kPairMaxHd = 256;  // the query pairs are packed on the stack

// The rows the AVX-512 tiles' SCORES step gathers (scores_b512); the other paths leave it empty.
struct ScoreBatch {
  ScoreRow rows[kScoreRows];
  int n = 0;
};

#if IKV_X86
using cpu::exp256;

// p[j] = exp(p[j] - max p) for j < n; returns the sum and stores the max in *mx (n >= 1).
IKV_TARGET_AVX2 inline double exp_shifted_avx2(float *p, int32_t n, float *mx_out) {
  __m256 mv = _mm256_set1_ps(-INFINITY);
  int32_t j = 0;
  for (; j + 8 <= n; j += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(p + j));
  float lanes[8];
  _mm256_storeu_ps(lanes, mv);
  float mx = lanes[0];
  for (int k = 1; k < 8; ++k) mx = std::max(mx, lanes[k]);
  for (int32_t k = j; k < n; ++k) mx = std::max(mx, p[k]);
  const __m256 mb = _mm256_set1_ps(mx);
  __m256 sv = _mm256_setzero_ps();
  j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(p + j), mb));
    _mm256_storeu_ps(p + j, e);
    sv = _mm256_add_ps(sv, e);
  }
  _mm256_storeu_ps(lanes, sv);
  double sum = 0;
  for (int k = 0; k < 8; ++k) sum += lanes[k];
  for (; j < n; ++j) {
    p[j] = std::exp(p[j] - mx);
    sum += p[j];
  }
  *mx_out = mx;
  return sum;
}

#endif  // IKV_X86

inline double exp_shifted(float *p, int32_t n, float *mx_out) {
#if IKV_X86
  if (cpu_has_avx2_fma_f16c()) return exp_shifted_avx2(p, n, mx_out);
#endif
  float mx = -INFINITY;
  for (int32_t j = 0; j < n; ++j) mx = std::max(mx, p[j]);
  double sum = 0;
  for (int32_t j = 0; j < n; ++j) {
    p[j] = std::exp(p[j] - mx);
    sum += p[j];
  }
  *mx_out = mx;
  return sum;
}

#if IKV_X86
IKV_TARGET_AVX2 inline void scale_avx2(float *p, int32_t n, float f) {
  const __m256 fv = _mm256_set1_ps(f);
  int32_t j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(p + j, _mm256_mul_ps(_mm256_loadu_ps(p + j), fv));
  for (; j < n; ++j) p[j] *= f;
}

#endif  // IKV_X86

inline void softmax_inplace(float *p, int32_t n) {
  float mx;
  const float inv = static_cast<float>(1.0 / exp_shifted(p, n, &mx));
#if IKV_X86
  if (cpu_has_avx2_fma_f16c()) {
    scale_avx2(p, n, inv);
    return;
  }
#endif
  for (int32_t j = 0; j < n; ++j) p[j] *= inv;
}

#if IKV_X86
// The end of the dot product of a and row b whose 8-wide chunks below n8 = n & ~7 are summed in acc: the lanes,
// then the tail.
template <KvDtype D>
IKV_TARGET_AVX2 inline __attribute__((always_inline)) float dot_finish(__m256 acc, const float *a, const void *b, int32_t n8,
                                                                int32_t n) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  float s = _mm_cvtss_f32(lo);
  for (int32_t i = n8; i < n; ++i) s = std::fma(a[i], tile::load1(b, i, D), s);  // fused, whatever -ffp-contract does
  return s;
}

// Scores of NQ query heads (qg, hd apart) against keys j < cnt of a block (key j at element j * hd of kb, stored as
// D): ph[q * pstride + j] = (q . k_j) * scale, three keys at a time so that each key load serves NQ heads and each
// query load three keys. Every score is one FMA chain over its 8-wide chunks, then dot_finish: the bits depend
// neither on the blocking nor on whether the keys were widened to f32 first.
template <int NQ, KvDtype D>
IKV_TARGET_AVX2 inline __attribute__((always_inline)) void scores_nq(float *ph, int64_t pstride, const float *qg,
                                                              const void *kb, int32_t cnt, int32_t hd, float scale) {
  const int32_t h8 = hd & ~7;
  int32_t j = 0;
  for (; j + 3 <= cnt; j += 3) {
    const int64_t e0 = static_cast<int64_t>(j) * hd, e1 = e0 + hd, e2 = e1 + hd;
    __m256 a[NQ][3];
    for (int q = 0; q < NQ; ++q) a[q][0] = a[q][1] = a[q][2] = _mm256_setzero_ps();
    for (int32_t i = 0; i < h8; i += 8) {
      const __m256 x0 = tile::load8(kb, e0 + i, D), x1 = tile::load8(kb, e1 + i, D), x2 = tile::load8(kb, e2 + i, D);
      for (int q = 0; q < NQ; ++q) {
        const __m256 qv = _mm256_loadu_ps(qg + static_cast<int64_t>(q) * hd + i);
        a[q][0] = _mm256_fmadd_ps(qv, x0, a[q][0]);
        a[q][1] = _mm256_fmadd_ps(qv, x1, a[q][1]);
        a[q][2] = _mm256_fmadd_ps(qv, x2, a[q][2]);
      }
    }
    const int64_t es = D == KvDtype::f32 ? 4 : 2;
    const auto *k0 = static_cast<const uint8_t *>(kb) + e0 * es;
    for (int q = 0; q < NQ; ++q) {
      const float *qh = qg + static_cast<int64_t>(q) * hd;
      float *row = ph + q * pstride + j;
      row[0] = dot_finish<D>(a[q][0], qh, k0, h8, hd) * scale;
      row[1] = dot_finish<D>(a[q][1], qh, k0 + hd * es, h8, hd) * scale;
      row[2] = dot_finish<D>(a[q][2], qh, k0 + 2 * hd * es, h8, hd) * scale;
    }
  }
  for (; j < cnt; ++j) {
    const int64_t e = static_cast<int64_t>(j) * hd;
    __m256 a[NQ];
    for (int q = 0; q < NQ; ++q) a[q] = _mm256_setzero_ps();
    for (int32_t i = 0; i < h8; i += 8) {
      const __m256 x = tile::load8(kb, e + i, D);
      for (int q = 0; q < NQ; ++q)
        a[q] = _mm256_fmadd_ps(_mm256_loadu_ps(qg + static_cast<int64_t>(q) * hd + i), x, a[q]);
    }
    const auto *kj = static_cast<const uint8_t *>(kb) + e * (D == KvDtype::f32 ? 4 : 2);
    for (int q = 0; q < NQ; ++q)
      ph[q * pstride + j] = dot_finish<D>(a[q], qg + static_cast<int64_t>(q) * hd, kj, h8, hd) * scale;
  }
}

// The lane sums of a[0..7] as one vector (sum k in lane k), each added in dot_finish's order:
// ((x0 + x4) + (x2 + x6)) + ((x1 + x5) + (x3 + x7)). Eight sums cost about as much as three done one at a time.
IKV_TARGET_AVX2 inline __attribute__((always_inline)) __m256 lane_sums8(const __m256 a[8]) {
  __m256 e[4];  // e[k] = [lo + hi of a[k] | lo + hi of a[k + 4]]: lane i holds x_i + x_{i+4}
  for (int k = 0; k < 4; ++k)
    e[k] = _mm256_add_ps(_mm256_permute2f128_ps(a[k], a[k + 4], 0x20), _mm256_permute2f128_ps(a[k], a[k + 4], 0x31));
  // per 128-bit half, p = b0 + b2 and q = b1 + b3 of two sums each: h = [p0 p1 q0 q1 | p4 p5 q4 q5], g likewise 2, 3
  const __m256 h = _mm256_add_ps(_mm256_unpacklo_ps(e[0], e[1]), _mm256_unpackhi_ps(e[0], e[1]));
  const __m256 g = _mm256_add_ps(_mm256_unpacklo_ps(e[2], e[3]), _mm256_unpackhi_ps(e[2], e[3]));
  return _mm256_add_ps(_mm256_shuffle_ps(h, g, _MM_SHUFFLE(1, 0, 1, 0)), _mm256_shuffle_ps(h, g, _MM_SHUFFLE(3, 2, 3, 2)));
}

// scores_nq for head dims that are a multiple of 8 (no scalar tail), KEYS keys at a time for NQ heads (NQ x KEYS <= 8
// sums: 3 x 2, 2 x 4 or 1 x 8) so that the sums are finished together (lane_sums8) and each key load serves NQ heads.
// The same FMA chains and the same additions as scores_nq, so the same bits; the keys left over (fewer than KEYS) go
// through scores_nq.
template <int NQ, int KEYS, KvDtype D>
IKV_TARGET_AVX2 inline __attribute__((always_inline)) void scores_nq8(float *ph, int64_t pstride, const float *qg,
                                                               const void *kb, int32_t cnt, int32_t hd, float scale) {
  static_assert(NQ * KEYS <= 8, "eight sums at most");
  const __m256 sv = _mm256_set1_ps(scale);
  int32_t j = 0;
  for (; j + KEYS <= cnt; j += KEYS) {
    const int64_t e0 = static_cast<int64_t>(j) * hd;
    __m256 a[8];
    for (int r = 0; r < 8; ++r) a[r] = _mm256_setzero_ps();  // the unused ones (NQ x KEYS < 8) sum zeros
    for (int32_t i = 0; i < hd; i += 8) {
      __m256 x[KEYS];
      for (int k = 0; k < KEYS; ++k) x[k] = tile::load8(kb, e0 + k * hd + i, D);
      for (int q = 0; q < NQ; ++q) {
        const __m256 qv = _mm256_loadu_ps(qg + static_cast<int64_t>(q) * hd + i);
        for (int k = 0; k < KEYS; ++k) a[q * KEYS + k] = _mm256_fmadd_ps(qv, x[k], a[q * KEYS + k]);
      }
    }
    const __m256 s = _mm256_mul_ps(lane_sums8(a), sv);  // lane q * KEYS + k: head q, key j + k
    if (NQ == 1 && KEYS == 8) {
      _mm256_storeu_ps(ph + j, s);
    } else if (NQ == 2 && KEYS == 4) {
      _mm_storeu_ps(ph + j, _mm256_castps256_ps128(s));
      _mm_storeu_ps(ph + pstride + j, _mm256_extractf128_ps(s, 1));
    } else {
      alignas(32) float t[8];
      _mm256_store_ps(t, s);
      for (int q = 0; q < NQ; ++q)
        for (int k = 0; k < KEYS; ++k) ph[q * pstride + j + k] = t[q * KEYS + k];
    }
  }
  if (j < cnt) {
    const int64_t es = D == KvDtype::f32 ? 4 : 2;
    scores_nq<NQ, D>(ph + j, pstride, qg, static_cast<const uint8_t *>(kb) + static_cast<int64_t>(j) * hd * es, cnt - j,
                     hd, scale);
  }
}

template <KvDtype D>
IKV_TARGET_AVX2 inline void scores_d(float *ph, int64_t pstride, const float *qg, int32_t group, const void *kb, int32_t cnt,
                       int32_t hd, float scale) {
  if ((hd & 7) == 0) {  // three heads at a time share each key load; then pairs, then one
    int32_t hh = 0;
    for (; hh + 3 <= group; hh += 3)
      scores_nq8<3, 2, D>(ph + hh * pstride, pstride, qg + static_cast<int64_t>(hh) * hd, kb, cnt, hd, scale);
    for (; hh + 2 <= group; hh += 2)
      scores_nq8<2, 4, D>(ph + hh * pstride, pstride, qg + static_cast<int64_t>(hh) * hd, kb, cnt, hd, scale);
    if (hh < group) scores_nq8<1, 8, D>(ph + hh * pstride, pstride, qg + static_cast<int64_t>(hh) * hd, kb, cnt, hd, scale);
    return;
  }
  int32_t hh = 0;
  for (; hh + 3 <= group; hh += 3)
    scores_nq<3, D>(ph + hh * pstride, pstride, qg + static_cast<int64_t>(hh) * hd, kb, cnt, hd, scale);
  const float *qr = qg + static_cast<int64_t>(hh) * hd;  // the one or two heads left
  if (group - hh == 2) scores_nq<2, D>(ph + hh * pstride, pstride, qr, kb, cnt, hd, scale);
  if (group - hh == 1) scores_nq<1, D>(ph + hh * pstride, pstride, qr, kb, cnt, hd, scale);
}

// Scores of the group's query heads (row hh at ph + hh * pstride) against a block stored as dt.
IKV_TARGET_AVX2 inline void scores_v(float *ph, int64_t pstride, const float *qg, int32_t group, const void *kb, KvDtype dt,
                       int32_t cnt, int32_t hd, float scale) {
  switch (dt) {
    case KvDtype::f32: scores_d<KvDtype::f32>(ph, pstride, qg, group, kb, cnt, hd, scale); break;
    case KvDtype::f16: scores_d<KvDtype::f16>(ph, pstride, qg, group, kb, cnt, hd, scale); break;
    case KvDtype::bf16: scores_d<KvDtype::bf16>(ph, pstride, qg, group, kb, cnt, hd, scale); break;
    default: break;  // quantised blocks arrive widened to f32 (paged_attention.cpp's block_src)
  }
}

// o[i] += w[j] * v_j[i] for j < cnt in order (v_j at element j * hd of vb, stored as D), o held in registers 64
// floats at a time instead of stored and reloaded after every key: each element gets one FMA per key, in key order,
// whatever the blocking and whether the values were widened to f32 first.
template <KvDtype D>
IKV_TARGET_AVX2 inline void wsum_d(float *o, const float *w, const void *vb, int32_t cnt, int32_t hd) {
  const int32_t h8 = hd & ~7;
  int32_t i0 = 0;
  for (; i0 + 64 <= h8; i0 += 64) {
    __m256 a[8];
    for (int r = 0; r < 8; ++r) a[r] = _mm256_loadu_ps(o + i0 + 8 * r);
    for (int32_t j = 0; j < cnt; ++j) {
      const __m256 wv = _mm256_set1_ps(w[j]);
      const int64_t e = static_cast<int64_t>(j) * hd + i0;
      for (int r = 0; r < 8; ++r) a[r] = _mm256_fmadd_ps(wv, tile::load8(vb, e + 8 * r, D), a[r]);
    }
    for (int r = 0; r < 8; ++r) _mm256_storeu_ps(o + i0 + 8 * r, a[r]);
  }
  for (; i0 < h8; i0 += 8) {
    __m256 a = _mm256_loadu_ps(o + i0);
    for (int32_t j = 0; j < cnt; ++j)
      a = _mm256_fmadd_ps(_mm256_set1_ps(w[j]), tile::load8(vb, static_cast<int64_t>(j) * hd + i0, D), a);
    _mm256_storeu_ps(o + i0, a);
  }
  for (int32_t i = h8; i < hd; ++i)
    for (int32_t j = 0; j < cnt; ++j) o[i] = std::fma(w[j], tile::load1(vb, static_cast<int64_t>(j) * hd + i, D), o[i]);
}

// Several weighted sums over one block of V at once: row r adds w[j] * v[j] for j < cnt into o (a query head of a
// tile). Head dims of 64 and up already run eight chains per row (wsum_d); below that a row is one or a few chains
// of dependent FMAs, so up to four rows run side by side, each V vector loaded once for all of them. Each row's
// chain still takes the keys in order: the same bits as wsum_d one row at a time.

template <KvDtype D, int R>
IKV_TARGET_AVX2 inline void wsum_rows_d(const WsumRow *rows, const void *vb, int32_t hd) {
  const int32_t h8 = hd & ~7;
  int32_t common = rows[0].cnt;
  for (int r = 1; r < R; ++r) common = std::min(common, rows[r].cnt);
  for (int32_t i0 = 0; i0 < h8; i0 += 8) {
    __m256 a[R];
    for (int r = 0; r < R; ++r) a[r] = _mm256_loadu_ps(rows[r].o + i0);
    for (int32_t j = 0; j < common; ++j) {
      const __m256 v = tile::load8(vb, static_cast<int64_t>(j) * hd + i0, D);
      for (int r = 0; r < R; ++r) a[r] = _mm256_fmadd_ps(_mm256_set1_ps(rows[r].w[j]), v, a[r]);
    }
    for (int r = 0; r < R; ++r) {
      for (int32_t j = common; j < rows[r].cnt; ++j)
        a[r] = _mm256_fmadd_ps(_mm256_set1_ps(rows[r].w[j]), tile::load8(vb, static_cast<int64_t>(j) * hd + i0, D), a[r]);
      _mm256_storeu_ps(rows[r].o + i0, a[r]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int32_t i = h8; i < hd; ++i)
      for (int32_t j = 0; j < rows[r].cnt; ++j)
        rows[r].o[i] = std::fma(rows[r].w[j], tile::load1(vb, static_cast<int64_t>(j) * hd + i, D), rows[r].o[i]);
}

template <KvDtype D>
IKV_TARGET_AVX2 inline void wsum_rows_t(const WsumRow *rows, int n, const void *vb, int32_t hd) {
  if (hd >= 64 || n == 1) {
    for (int r = 0; r < n; ++r) wsum_d<D>(rows[r].o, rows[r].w, vb, rows[r].cnt, hd);
    return;
  }
  switch (n) {
    case 2: wsum_rows_d<D, 2>(rows, vb, hd); break;
    case 3: wsum_rows_d<D, 3>(rows, vb, hd); break;
    default: wsum_rows_d<D, 4>(rows, vb, hd); break;
  }
}

IKV_TARGET_AVX2 inline void wsum_rows_v(const WsumRow *rows, int n, const void *vb, KvDtype dt, int32_t hd) {
  switch (dt) {
    case KvDtype::f32: wsum_rows_t<KvDtype::f32>(rows, n, vb, hd); break;
    case KvDtype::f16: wsum_rows_t<KvDtype::f16>(rows, n, vb, hd); break;
    case KvDtype::bf16: wsum_rows_t<KvDtype::bf16>(rows, n, vb, hd); break;
    default: break;  // quantised blocks arrive widened to f32
  }
}

// ---- AVX-512 (cpu_has_avx512): the same chains, two of them per 16-wide vector ------------------------------
// Prefill tiles (whose K/V blocks are widened to f32 once for the tile) spend most of their attention time in the
// scores and the weighted sums. With AVX-512 two 8-wide chains share one instruction: a query pair's chunk sits in the
// two halves of a vector against one key chunk broadcast to both, and lane_sums16 finishes the two halves as
// lane_sums8 finishes one. Each half does exactly the additions the AVX2 code does, so a query scored here and the
// same query scored alone by the AVX2 code (decode) are the same bits.

// lane_sums8 of the low 256-bit halves of a[0..7] in lanes 0..7 and of the high halves in lanes 8..15.
IKV_TARGET_AVX512 inline __attribute__((always_inline)) __m512 lane_sums16(const __m512 a[8]) {
  // per half: [lo128 | hi128] of a[k] with [lo128 | hi128] of a[k + 4], as permute2f128 0x20 and 0x31 do per ymm
  const __m512i lo = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
  const __m512i hi = _mm512_setr_epi32(4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
  __m512 e[4];
  for (int k = 0; k < 4; ++k)
    e[k] = _mm512_add_ps(_mm512_permutex2var_ps(a[k], lo, a[k + 4]), _mm512_permutex2var_ps(a[k], hi, a[k + 4]));
  // the rest works within 128-bit lanes, as in lane_sums8
  const __m512 h = _mm512_add_ps(_mm512_unpacklo_ps(e[0], e[1]), _mm512_unpackhi_ps(e[0], e[1]));
  const __m512 g = _mm512_add_ps(_mm512_unpacklo_ps(e[2], e[3]), _mm512_unpackhi_ps(e[2], e[3]));
  return _mm512_add_ps(_mm512_shuffle_ps(h, g, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_ps(h, g, _MM_SHUFFLE(3, 2, 3, 2)));
}


// Rows 0..n-1 (n = 2 or 4: one or two query pairs) against the f32 keys at kb (key j at j * hd, hd a multiple of 8 up
// to kPairMaxHd), 8 / pairs keys at a time for the keys all the rows see; the rest of each row through scores_nq<1>.
// Pair r / 2 holds row r in half r % 2: result lanes 8 * (r % 2) + KEYS * (r / 2) + k are row r's key j + k.
template <int PAIRS>
IKV_TARGET_AVX512 inline void scores_pairs512(const ScoreRow *rows, const float *kb, int32_t hd, float scale) {
  constexpr int KEYS = 8 / PAIRS, N = 2 * PAIRS;
  alignas(64) float qp[PAIRS][2 * kPairMaxHd];
  int32_t common = rows[0].cnt;
  for (int r = 1; r < N; ++r) common = std::min(common, rows[r].cnt);
  for (int pr = 0; pr < PAIRS; ++pr)
    for (int32_t c = 0; c < hd; c += 8) {
      _mm256_store_ps(qp[pr] + 2 * c, _mm256_loadu_ps(rows[2 * pr].q + c));
      _mm256_store_ps(qp[pr] + 2 * c + 8, _mm256_loadu_ps(rows[2 * pr + 1].q + c));
    }
  const __m512 sv = _mm512_set1_ps(scale);
  int32_t j = 0;
  for (; j + KEYS <= common; j += KEYS) {
    __m512 a[8];
    for (int i = 0; i < 8; ++i) a[i] = _mm512_setzero_ps();
    const float *kj = kb + static_cast<int64_t>(j) * hd;
    for (int32_t c = 0; c < hd; c += 8) {
      __m512 kv[KEYS];
      for (int k = 0; k < KEYS; ++k) kv[k] = _mm512_broadcast_f32x8(_mm256_loadu_ps(kj + static_cast<int64_t>(k) * hd + c));
      for (int pr = 0; pr < PAIRS; ++pr) {
        const __m512 qv = _mm512_load_ps(qp[pr] + 2 * c);
        for (int k = 0; k < KEYS; ++k) a[pr * KEYS + k] = _mm512_fmadd_ps(qv, kv[k], a[pr * KEYS + k]);
      }
    }
    alignas(64) float t[16];
    _mm512_store_ps(t, _mm512_mul_ps(lane_sums16(a), sv));
    for (int r = 0; r < N; ++r) std::memcpy(rows[r].out + j, t + 8 * (r % 2) + KEYS * (r / 2), sizeof(float) * KEYS);
  }
  for (int r = 0; r < N; ++r)
    if (j < rows[r].cnt)
      scores_nq<1, KvDtype::f32>(rows[r].out + j, 0, rows[r].q, kb + static_cast<int64_t>(j) * hd, rows[r].cnt - j, hd, scale);
}

// Rows gathered across the queries of a tile, scored four (or two) at a time; a lone row by scores_nq8<1, 8>.
IKV_TARGET_AVX512 inline void scores_rows512(const ScoreRow *rows, int n, const float *kb, int32_t hd, float scale) {
  int r = 0;
  for (; r + 4 <= n; r += 4) scores_pairs512<2>(rows + r, kb, hd, scale);
  if (r + 2 <= n) scores_pairs512<1>(rows + r, kb, hd, scale), r += 2;
  if (r < n) scores_nq8<1, 8, KvDtype::f32>(rows[r].out, 0, rows[r].q, kb, rows[r].cnt, hd, scale);
}

// q8_0 K/V read in place by a decode step (AVX-512): elements e .. e+15 (or 8) of a block's rows, e a multiple of 8
// inside one 32-value block, widened as the dequantiser widens them (int8 times the f16 scale: exact in f32), so the
// products that follow are those of the block widened first.
IKV_TARGET_AVX512 inline __attribute__((always_inline)) float q8_scale(const uint8_t *blk) {
  uint16_t h;
  std::memcpy(&h, blk, 2);
  return _cvtsh_ss(h);
}
IKV_TARGET_AVX512 inline __attribute__((always_inline)) __m512 load16_q8(const void *b, int64_t e) {
  const auto *blk = static_cast<const uint8_t *>(b) + (e >> 5) * kvq::kQ8Bytes;
  const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(blk + 2 + (e & 31))));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(q), _mm512_set1_ps(q8_scale(blk)));
}
// Keys ea and eb's elements, eight each, in the two halves.
IKV_TARGET_AVX512 inline __attribute__((always_inline)) __m512 load8x2_q8(const void *b, int64_t ea, int64_t eb) {
  const auto *pa = static_cast<const uint8_t *>(b) + (ea >> 5) * kvq::kQ8Bytes;
  const auto *pb = static_cast<const uint8_t *>(b) + (eb >> 5) * kvq::kQ8Bytes;
  const __m128i q = _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(pa + 2 + (ea & 31))),
                                       _mm_loadl_epi64(reinterpret_cast<const __m128i *>(pb + 2 + (eb & 31))));
  const __m512 d = _mm512_insertf32x8(_mm512_set1_ps(q8_scale(pa)), _mm256_set1_ps(q8_scale(pb)), 1);
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d);
}
template <KvDtype D>
IKV_TARGET_AVX512 inline __attribute__((always_inline)) __m512 load16_kv(const void *b, int64_t e) {
  if constexpr (D == KvDtype::q8_0) return load16_q8(b, e);
  else return tile::load16(b, e, D);
}

// Two keys per vector (key j + 2kp in the low half, j + 2kp + 1 in the high half) against a query chunk broadcast to
// both: NQ heads (up to 4) x KP key pairs at a time, read from f16/bf16 (or f32) K directly, each pair of key chunks
// widened once for the NQ heads. How a decode step scores its group. Lane i of the low half of lane_sums16's result
// is head i / KP, key j + 2 (i % KP); the high half the key after it. The keys left over go through scores_nq.
constexpr int32_t kKeyPairTail = 15;  // most keys scores_keypairs512 leaves to scores_nq (KEYS - 1)

template <int NQ, KvDtype D>
IKV_TARGET_AVX512 inline void scores_keypairs512(float *ph, int64_t pstride, const float *qg, const void *kb, int32_t cnt,
                                          int32_t hd, float scale) {
  constexpr int KP = NQ == 1 ? 8 : NQ == 2 ? 4 : 2, KEYS = 2 * KP;
  const __m512 sv = _mm512_set1_ps(scale);
  int32_t j = 0;
  for (; j + KEYS <= cnt; j += KEYS) {
    __m512 a[8];
    for (int i = 0; i < 8; ++i) a[i] = _mm512_setzero_ps();  // NQ x KP < 8: the unused ones sum zeros
    const int64_t e0 = static_cast<int64_t>(j) * hd;
    for (int32_t c = 0; c < hd; c += 8) {
      __m512 kv[KP];
      for (int kp = 0; kp < KP; ++kp) {
        const int64_t ea = e0 + static_cast<int64_t>(2 * kp) * hd + c, eb = ea + hd;
        if constexpr (D == KvDtype::f32) {
          const auto *k = static_cast<const float *>(kb);
          kv[kp] = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(k + ea)), _mm256_loadu_ps(k + eb), 1);
        } else if constexpr (D == KvDtype::q8_0) {
          kv[kp] = load8x2_q8(kb, ea, eb);
        } else {
          const auto *k = static_cast<const uint16_t *>(kb);
          const __m256i h = _mm256_inserti128_si256(
              _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(k + ea))),
              _mm_loadu_si128(reinterpret_cast<const __m128i *>(k + eb)), 1);
          if constexpr (D == KvDtype::f16) kv[kp] = _mm512_cvtph_ps(h);
          else kv[kp] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        }
      }
      for (int q = 0; q < NQ; ++q) {
        const __m512 qv = _mm512_broadcast_f32x8(_mm256_loadu_ps(qg + static_cast<int64_t>(q) * hd + c));
        for (int kp = 0; kp < KP; ++kp) a[q * KP + kp] = _mm512_fmadd_ps(qv, kv[kp], a[q * KP + kp]);
      }
    }
    alignas(64) float t[16];
    _mm512_store_ps(t, _mm512_mul_ps(lane_sums16(a), sv));
    for (int q = 0; q < NQ; ++q)
      for (int kp = 0; kp < KP; ++kp) {
        ph[q * pstride + j + 2 * kp] = t[q * KP + kp];
        ph[q * pstride + j + 2 * kp + 1] = t[8 + q * KP + kp];
      }
  }
  if (j < cnt) {
    if constexpr (D == KvDtype::q8_0) {  // the keys left over widened first: the same products
      alignas(64) float kf[kKeyPairTail * 256];
      if (hd <= 256) {
        load_row_rotated(kf, static_cast<const uint8_t *>(kb) + kv_bytes(D, static_cast<int64_t>(j) * hd), (cnt - j) * hd, D);
        scores_nq<NQ, KvDtype::f32>(ph + j, pstride, qg, kf, cnt - j, hd, scale);
      }
    } else {
      const int64_t es = D == KvDtype::f32 ? 4 : 2;
      scores_nq<NQ, D>(ph + j, pstride, qg, static_cast<const uint8_t *>(kb) + static_cast<int64_t>(j) * hd * es,
                       cnt - j, hd, scale);
    }
  }
}

template <KvDtype D>
IKV_TARGET_AVX512 inline void scores_keypairs_d(float *ph, int64_t pstride, const float *qg, int32_t group, const void *kb,
                                         int32_t cnt, int32_t hd, float scale) {
  for (int32_t hh = 0; hh < group; hh += 4) {
    float *p = ph + hh * pstride;
    const float *qh = qg + static_cast<int64_t>(hh) * hd;
    switch (std::min(4, group - hh)) {
      case 1: scores_keypairs512<1, D>(p, pstride, qh, kb, cnt, hd, scale); break;
      case 2: scores_keypairs512<2, D>(p, pstride, qh, kb, cnt, hd, scale); break;
      case 3: scores_keypairs512<3, D>(p, pstride, qh, kb, cnt, hd, scale); break;
      default: scores_keypairs512<4, D>(p, pstride, qh, kb, cnt, hd, scale); break;
    }
  }
}

// The SCORES step of the AVX-512 tiles: a group's rows join the batch when the block is f32 (a tile's widened block)
// and the head dim suits the query pairs (flushed four at a time, and by scores_flush512 at the end of the block);
// f16/bf16 blocks read in place (a decode step) take the key pairs; head dims not a multiple of 8 take scores_v.

IKV_TARGET_AVX512 inline void scores_b512(float *ph, int64_t pstride, const float *qg, int32_t group, const void *kb, KvDtype dt,
                                   int32_t cnt, int32_t hd, float scale, ScoreBatch &b) {
  if ((hd & 7) != 0) {
    scores_v(ph, pstride, qg, group, kb, dt, cnt, hd, scale);
    return;
  }
  if (dt == KvDtype::f16) return scores_keypairs_d<KvDtype::f16>(ph, pstride, qg, group, kb, cnt, hd, scale);
  if (dt == KvDtype::bf16) return scores_keypairs_d<KvDtype::bf16>(ph, pstride, qg, group, kb, cnt, hd, scale);
  if (dt == KvDtype::q8_0 && hd <= 256) return scores_keypairs_d<KvDtype::q8_0>(ph, pstride, qg, group, kb, cnt, hd, scale);
  if (hd > kPairMaxHd) return scores_keypairs_d<KvDtype::f32>(ph, pstride, qg, group, kb, cnt, hd, scale);
  for (int32_t hh = 0; hh < group; ++hh) {
    b.rows[b.n++] = {ph + hh * pstride, qg + static_cast<int64_t>(hh) * hd, cnt};
    if (b.n == kScoreRows) scores_rows512(b.rows, b.n, static_cast<const float *>(kb), hd, scale), b.n = 0;
  }
}

IKV_TARGET_AVX512 inline void scores_flush512(ScoreBatch &b, const void *kb, int32_t hd, float scale) {
  if (b.n > 0) scores_rows512(b.rows, b.n, static_cast<const float *>(kb), hd, scale);
  b.n = 0;
}

// wsum_d with 16-wide vectors (hd a multiple of 16): each element still one FMA per key, in key order.
template <KvDtype D>
IKV_TARGET_AVX512 inline void wsum_d512(float *o, const float *w, const void *vb, int32_t j0, int32_t cnt, int32_t hd) {
  int32_t i0 = 0;
  for (; i0 + 64 <= hd; i0 += 64) {
    __m512 a[4];
    for (int r = 0; r < 4; ++r) a[r] = _mm512_loadu_ps(o + i0 + 16 * r);
    for (int32_t j = j0; j < cnt; ++j) {
      const __m512 wv = _mm512_set1_ps(w[j]);
      const int64_t e = static_cast<int64_t>(j) * hd + i0;
      for (int r = 0; r < 4; ++r) a[r] = _mm512_fmadd_ps(wv, load16_kv<D>(vb, e + 16 * r), a[r]);
    }
    for (int r = 0; r < 4; ++r) _mm512_storeu_ps(o + i0 + 16 * r, a[r]);
  }
  for (; i0 < hd; i0 += 16) {
    __m512 a = _mm512_loadu_ps(o + i0);
    for (int32_t j = j0; j < cnt; ++j)
      a = _mm512_fmadd_ps(_mm512_set1_ps(w[j]), load16_kv<D>(vb, static_cast<int64_t>(j) * hd + i0), a);
    _mm512_storeu_ps(o + i0, a);
  }
}

// R rows (1 to 4) of head dim 64 over one block: each V vector loaded (and widened) once for all of them, up to the
// keys they all see, then each row's remaining keys (still in key order). A decode step's group of query heads
// shares every f16 V load this way.
template <KvDtype D, int R>
IKV_TARGET_AVX512 inline void wsum_rows_64(const WsumRow *rows, const void *vb) {
  int32_t common = rows[0].cnt;
  for (int r = 1; r < R; ++r) common = std::min(common, rows[r].cnt);
  __m512 a[R][4];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < 4; ++c) a[r][c] = _mm512_loadu_ps(rows[r].o + 16 * c);
  for (int32_t j = 0; j < common; ++j) {
    __m512 v[4];
    for (int c = 0; c < 4; ++c) v[c] = load16_kv<D>(vb, static_cast<int64_t>(j) * 64 + 16 * c);
    for (int r = 0; r < R; ++r) {
      const __m512 wv = _mm512_set1_ps(rows[r].w[j]);
      for (int c = 0; c < 4; ++c) a[r][c] = _mm512_fmadd_ps(wv, v[c], a[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < 4; ++c) _mm512_storeu_ps(rows[r].o + 16 * c, a[r][c]);
  for (int r = 0; r < R; ++r)
    if (common < rows[r].cnt) wsum_d512<D>(rows[r].o, rows[r].w, vb, common, rows[r].cnt, 64);
}

template <KvDtype D>
IKV_TARGET_AVX512 inline void wsum_rows_t512(const WsumRow *rows, int n, const void *vb, int32_t hd) {
  if (hd == 64) {
    switch (n) {
      case 1: wsum_rows_64<D, 1>(rows, vb); return;
      case 2: wsum_rows_64<D, 2>(rows, vb); return;
      case 3: wsum_rows_64<D, 3>(rows, vb); return;
      default: wsum_rows_64<D, 4>(rows, vb); return;
    }
  }
  for (int r = 0; r < n; ++r) wsum_d512<D>(rows[r].o, rows[r].w, vb, 0, rows[r].cnt, hd);
}

IKV_TARGET_AVX512 inline void wsum_rows_v512(const WsumRow *rows, int n, const void *vb, KvDtype dt, int32_t hd) {
  if ((hd & 15) != 0) {
    wsum_rows_v(rows, n, vb, dt, hd);
    return;
  }
  switch (dt) {
    case KvDtype::f32: wsum_rows_t512<KvDtype::f32>(rows, n, vb, hd); break;
    case KvDtype::f16: wsum_rows_t512<KvDtype::f16>(rows, n, vb, hd); break;
    case KvDtype::bf16: wsum_rows_t512<KvDtype::bf16>(rows, n, vb, hd); break;
    case KvDtype::q8_0: wsum_rows_t512<KvDtype::q8_0>(rows, n, vb, hd); break;
    default: break;  // q4_0 blocks arrive widened to f32
  }
}

#endif  // IKV_X86

inline float dot_s(const float *a, const float *b, int32_t n) {
  float s = 0;
  for (int32_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

inline void axpy_s(float *o, float w, const float *v, int32_t n) {
  for (int32_t i = 0; i < n; ++i) o[i] += w * v[i];
}

// The portable twins of scores_v and wsum_rows_v, one score and one key at a time; they read f32 blocks only (the
// portable path always widens a block first).
inline void scores_s(float *ph, int64_t pstride, const float *qg, int32_t group, const void *kb, KvDtype, int32_t cnt,
              int32_t hd, float scale) {
  const auto *k = static_cast<const float *>(kb);
  for (int32_t hh = 0; hh < group; ++hh)
    for (int32_t j = 0; j < cnt; ++j)
      ph[hh * pstride + j] = dot_s(qg + static_cast<int64_t>(hh) * hd, k + static_cast<int64_t>(j) * hd, hd) * scale;
}

inline void wsum_s(float *o, const float *w, const void *vb, KvDtype, int32_t cnt, int32_t hd) {
  const auto *v = static_cast<const float *>(vb);
  for (int32_t j = 0; j < cnt; ++j) axpy_s(o, w[j], v + static_cast<int64_t>(j) * hd, hd);
}

inline void wsum_rows_s(const WsumRow *rows, int n, const void *vb, KvDtype dt, int32_t hd) {
  for (int r = 0; r < n; ++r) wsum_s(rows[r].o, rows[r].w, vb, dt, rows[r].cnt, hd);
}

}  // namespace attn
}  // namespace cpu
}  // namespace infokv
