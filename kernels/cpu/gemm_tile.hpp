// The register-blocked f32 tile shared by the CPU matrix products (matmul.cpp for f32/f16/bf16 weights read in
// place, matmul_quant.cpp for quantised rows expanded into an f32 buffer). Internal to kernels/cpu.
//
// Every output is one chain of FMAs over its 8-wide chunks in order (16-wide where the CPU has AVX-512, see
// tile_avx512), summed across lanes, then the scalar tail: the same order whatever tile it falls in, so a token's
// result does not depend on what it was batched with or on how rows were shared among threads. A tile of RM weight
// rows x RN tokens keeps RM*RN accumulators in registers: each chunk loads RN activation vectors and RM weight
// vectors for RM*RN FMAs (4 x 3 fills AVX2's sixteen registers, 4 x 6 most of AVX-512's 32), so activations are
// read from cache once per four rows instead of once per row. Quantised weights on AVX-512 CPUs take run_panels
// instead for products of 16 tokens or more (plain k-order sums; see there).
#pragma once
#include "kernels/cpu/simd.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/fp16.hpp"
#include "kernels/paged_kv.hpp"

namespace infokv {
namespace cpu {
namespace tile {

// Weights read in place are f32, f16 or bf16, the KV cache's three float element types: one enum, and one pair of
// loaders (attention_math.hpp reads K/V with them too; a quantised KV block reaches it widened to f32).
using WKind = KvDtype;

#if IKV_X86
IKV_TARGET_AVX2 inline __attribute__((always_inline)) __m256 load8(const void *w, int64_t i,
                                                                                        WKind kind) {
  switch (kind) {
    case WKind::f32: return _mm256_loadu_ps(static_cast<const float *>(w) + i);
    case WKind::f16:
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(static_cast<const uint16_t *>(w) + i)));
    case WKind::bf16: {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i *>(static_cast<const uint16_t *>(w) + i));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    default: break;
  }
  return _mm256_setzero_ps();
}
#endif  // IKV_X86

inline float load1(const void *w, int64_t i, WKind kind) {
  switch (kind) {
    case WKind::f32: return static_cast<const float *>(w)[i];
    case WKind::f16: return fp16_to_float(static_cast<const uint16_t *>(w)[i]);
    case WKind::bf16: return bf16_to_float(static_cast<const uint16_t *>(w)[i]);
    default: break;
  }
  return 0;
}

#if IKV_X86
IKV_TARGET_AVX2 inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  __m128 sh = _mm_movehdup_ps(lo);
  __m128 s = _mm_add_ps(lo, sh);
  sh = _mm_movehl_ps(sh, s);
  s = _mm_add_ss(s, sh);
  return _mm_cvtss_f32(s);
}

// The lane sums of a[0..7] as one vector (sum k in lane k), each added in exactly hsum's order,
// ((x0 + x4) + (x1 + x5)) + ((x2 + x6) + (x3 + x7)): the same bits as eight hsum calls for about the cost of three.
// Per 128-bit half, [y0 + y1 of u, of v, y2 + y3 of u, of v].
IKV_TARGET_AVX2 inline __attribute__((always_inline)) __m256 hsum8_pair(__m256 u, __m256 v) {
  const __m256 lo = _mm256_unpacklo_ps(u, v), hi = _mm256_unpackhi_ps(u, v);
  return _mm256_add_ps(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(1, 0, 1, 0)), _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 2, 3, 2)));
}

IKV_TARGET_AVX2 inline __attribute__((always_inline)) __m256 hsum8(const __m256 a[8]) {
  __m256 e[4];  // e[k] = [lo + hi of a[k] | lo + hi of a[k + 4]]: lane i holds y_i = x_i + x_{i+4}
  for (int k = 0; k < 4; ++k)
    e[k] = _mm256_add_ps(_mm256_permute2f128_ps(a[k], a[k + 4], 0x20), _mm256_permute2f128_ps(a[k], a[k + 4], 0x31));
  const __m256 h = hsum8_pair(e[0], e[1]), g = hsum8_pair(e[2], e[3]);
  return _mm256_add_ps(_mm256_shuffle_ps(h, g, _MM_SHUFFLE(1, 0, 1, 0)), _mm256_shuffle_ps(h, g, _MM_SHUFFLE(3, 2, 3, 2)));
}

// The end of a tile: lane sums of the RM x RN accumulators, eight at a time where there are at least three to finish
// (hsum8 costs about three hsums), then the scalar tail k0 .. k-1 of each output, and the stores.
template <WKind K, int RM, int RN>
IKV_TARGET_AVX2 inline __attribute__((always_inline)) void finish(
    float *out, const __m256 (*acc)[RN], const float *const *xs, const uint8_t *const *wr, int64_t k0, int64_t r0,
    int64_t t0, int64_t m, int64_t k) {
  constexpr int kAcc = RM * RN;
  constexpr int kGroups = kAcc >= 3 ? (kAcc - 3) / 8 + 1 : 0;  // groups of eight that start with >= 3 left
  float sums[kGroups * 8 + kAcc];
  for (int g = 0; g < kGroups; ++g) {
    __m256 v[8];
    for (int i = 0; i < 8; ++i) v[i] = 8 * g + i < kAcc ? acc[(8 * g + i) / RN][(8 * g + i) % RN] : _mm256_setzero_ps();
    _mm256_storeu_ps(sums + 8 * g, hsum8(v));
  }
  for (int a = kGroups * 8; a < kAcc; ++a) sums[a] = hsum(acc[a / RN][a % RN]);
  for (int r = 0; r < RM; ++r)
    for (int t = 0; t < RN; ++t) {
      float s = sums[r * RN + t];
      for (int64_t i = k0; i < k; ++i) s = __builtin_fmaf(xs[t][i], load1(wr[r], i, K), s);
      out[(t0 + t) * m + r0 + r] = s;
    }
}

// Rows r0 .. r0+RM-1 of the output (their weights at wbase, wstride bytes apart) for tokens t0 .. t0+RN-1.
template <WKind K, int RM, int RN>
IKV_TARGET_AVX2 void tile_avx2(float *out, const float *x, const uint8_t *wbase, int64_t wstride,
                                                        int64_t r0, int64_t t0, int64_t m, int64_t k) {
  const int64_t k8 = k & ~int64_t{7};
  const uint8_t *wr[RM];
  const float *xs[RN];
  for (int r = 0; r < RM; ++r) wr[r] = wbase + r * wstride;
  for (int t = 0; t < RN; ++t) xs[t] = x + (t0 + t) * k;
  __m256 acc[RM][RN];
  for (int r = 0; r < RM; ++r)
    for (int t = 0; t < RN; ++t) acc[r][t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < k8; i += 8) {
    __m256 xv[RN];
    for (int t = 0; t < RN; ++t) xv[t] = _mm256_loadu_ps(xs[t] + i);
    for (int r = 0; r < RM; ++r) {
      __m256 wv = load8(wr[r], i, K);
      __asm__("" : "+x"(wv));  // one load per weight vector (see tile_avx512)
      for (int t = 0; t < RN; ++t) acc[r][t] = _mm256_fmadd_ps(xv[t], wv, acc[r][t]);
    }
  }
  finish<K, RM, RN>(out, acc, xs, wr, k8, r0, t0, m, k);
}

// The same tile with 16-wide vectors, on CPUs with AVX-512 (cpu_has_avx512; every tile there takes this one, so the
// order stays the same whatever tile an output falls in): one FMA chain per output over its 16-wide chunks, folded
// to eight lanes (lane j + lane j + 8), one more 8-wide FMA when eight or more elements are left, then finish().

IKV_TARGET_AVX512 inline __attribute__((always_inline)) __m512 load16(const void *w, int64_t i, WKind kind) {
  const auto *h = reinterpret_cast<const __m256i *>(static_cast<const uint16_t *>(w) + i);
  switch (kind) {
    case WKind::f32: return _mm512_loadu_ps(static_cast<const float *>(w) + i);
    case WKind::f16: return _mm512_cvtph_ps(_mm256_loadu_si256(h));
    case WKind::bf16: return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(h)), 16));
    default: break;
  }
  return _mm512_setzero_ps();
}

template <WKind K, int RM, int RN>
IKV_TARGET_AVX512 void tile_avx512(float *out, const float *x, const uint8_t *wbase, int64_t wstride, int64_t r0, int64_t t0,
                             int64_t m, int64_t k) {
  const int64_t k16 = k & ~int64_t{15};
  const uint8_t *wr[RM];
  const float *xs[RN];
  for (int r = 0; r < RM; ++r) wr[r] = wbase + r * wstride;
  for (int t = 0; t < RN; ++t) xs[t] = x + (t0 + t) * k;
  __m512 acc[RM][RN];
  for (int r = 0; r < RM; ++r)
    for (int t = 0; t < RN; ++t) acc[r][t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < k16; i += 16) {
    __m512 xv[RN];
    for (int t = 0; t < RN; ++t) xv[t] = _mm512_loadu_ps(xs[t] + i);
    for (int r = 0; r < RM; ++r) {
      __m512 wv = load16(wr[r], i, K);
      __asm__("" : "+v"(wv));  // one load per weight vector: without this GCC folds it into every token's FMA
      for (int t = 0; t < RN; ++t) acc[r][t] = _mm512_fmadd_ps(xv[t], wv, acc[r][t]);
    }
  }
  __m256 acc8[RM][RN];
  for (int r = 0; r < RM; ++r)
    for (int t = 0; t < RN; ++t)
      acc8[r][t] = _mm256_add_ps(_mm512_castps512_ps256(acc[r][t]), _mm512_extractf32x8_ps(acc[r][t], 1));
  int64_t k0 = k16;
  if (k - k16 >= 8) {
    for (int r = 0; r < RM; ++r) {
      const __m256 wv = load8(wr[r], k16, K);
      for (int t = 0; t < RN; ++t) acc8[r][t] = _mm256_fmadd_ps(_mm256_loadu_ps(xs[t] + k16), wv, acc8[r][t]);
    }
    k0 += 8;
  }
  finish<K, RM, RN>(out, acc8, xs, wr, k0, r0, t0, m, k);
}
#endif  // IKV_X86

// Tokens are taken this many at a time: their activations stay in L2 while the rows pass over them.
constexpr int64_t kTokenChunk = 64;
// Bytes of f32 rows widened at a time for run_block (see block_rows).
constexpr int64_t kBlockBytes = 64 * 1024;
// How far ahead of the row being read decode asks for weight bytes (prefetch_l1): f16/bf16 rows read in place by
// run(), and quantised rows in matmul_quant's fused dots. 1-2 KB ahead measured best, 3 KB and more worse; see
// packaging/docs/performance.md, "Kernel choices".
constexpr int64_t kRowsAhead = 1536;
// For the fused quantised dots: 2 KB on Intel; 8 KB on AMD, where 2 KB ahead left decode waiting on DRAM
// (measured; packaging/docs/performance.md, "Kernel choices").
inline int64_t fused_ahead() {
  static const int64_t ahead = cpu_is_amd() ? 8192 : 2048;
  return ahead;
}

#if IKV_X86
using TileFn = void (*)(float *, const float *, const uint8_t *, int64_t, int64_t, int64_t, int64_t, int64_t);

template <WKind K, int RM, bool Wide>
TileFn tile_for(int rn) {
  if constexpr (Wide) {
    switch (rn) {
      case 1: return tile_avx512<K, RM, 1>;
      case 2: return tile_avx512<K, RM, 2>;
      case 3: return tile_avx512<K, RM, 3>;
      case 4: return tile_avx512<K, RM, 4>;
      case 5: return tile_avx512<K, RM, 5>;
      default: return tile_avx512<K, RM, 6>;
    }
  } else {
    return rn == 1 ? tile_avx2<K, RM, 1> : rn == 2 ? tile_avx2<K, RM, 2> : tile_avx2<K, RM, 3>;
  }
}

template <WKind K, bool Wide>
TileFn pick_in(int rm, int rn) {
  if (rm == 8 && rn == 1) return Wide ? tile_avx512<K, 8, 1> : tile_avx2<K, 8, 1>;
  switch (rm) {
    case 1: return tile_for<K, 1, Wide>(rn);
    case 2: return tile_for<K, 2, Wide>(rn);
    case 3: return tile_for<K, 3, Wide>(rn);
    default: return tile_for<K, 4, Wide>(rn);
  }
}

template <WKind K>
TileFn pick(int rm, int rn) {
  const bool wide = cpu_has_avx512();
  return wide ? pick_in<K, true>(rm, rn) : pick_in<K, false>(rm, rn);
}

#endif  // IKV_X86

// Asks for the cache lines of bytes [b, e) of base to be brought into L1 (none when b >= e). Decode reads each
// weight row once, in order; on some machines the hardware prefetchers fall far behind that stream and decode waits
// on DRAM: asking for the bytes a row or two ahead (kRowsAhead, fused_ahead) keeps it fed (measured; see
// packaging/docs/performance.md, "Kernel choices").
inline void prefetch_l1(const uint8_t *base, int64_t b, int64_t e) {
  for (; b < e; b += 64) __builtin_prefetch(base + b, 0, 3);  // prefetcht0 on x86, prfm pldl1keep on ARM
}

#if IKV_X86

// Output rows r0 .. r1-1 (row r's weights at wbase + (r - r0) * wstride) for tokens t0 .. t1-1, in tiles of up to
// 4 rows x 3 tokens (x 6 with AVX-512). A lone token over f32 rows (small models, or a buffer of expanded rows in L1) takes 8 rows a
// tile, so eight independent FMA chains hide the FMA latency. A lone token over f16/bf16 rows read in place (decode
// on a model far larger than the caches) takes one row at a time: the weights are then read as one sequential
// stream, which the hardware prefetchers follow (helped by prefetch_l1); eight rows side by side are eight streams
// 2k bytes apart, which measured slower (packaging/docs/performance.md, "Kernel choices").
template <WKind K>
void run(float *out, const float *x, const uint8_t *wbase, int64_t wstride, int64_t r0, int64_t r1, int64_t t0,
         int64_t t1, int64_t m, int64_t k) {
  const int64_t rows_per = t1 - t0 == 1 ? (K == WKind::f32 ? 8 : 1) : 4;
  static const int64_t tokens_per = cpu_has_avx512() ? 6 : 3;
  const int64_t end = (r1 - r0) * wstride;
  for (int64_t r = r0; r < r1; r += rows_per) {
    const int64_t rm = std::min(rows_per, r1 - r), at = (r - r0) * wstride;
    const uint8_t *wb = wbase + at;
    if (t1 - t0 < 4) prefetch_l1(wbase, at + kRowsAhead, std::min(end, at + kRowsAhead + rm * wstride));
    for (int64_t t = t0; t < t1; t += tokens_per) {
      const int rn = static_cast<int>(std::min<int64_t>(tokens_per, t1 - t));
      if (rm == 8 || rm <= 4) {
        pick<K>(static_cast<int>(rm), rn)(out, x, wb, wstride, r, t, m, k);
      } else {  // 5..7 rows left of a lone token
        pick<K>(4, rn)(out, x, wb, wstride, r, t, m, k);
        pick<K>(static_cast<int>(rm - 4), rn)(out, x, wb + 4 * wstride, wstride, r + 4, t, m, k);
      }
    }
  }
}

// The same outputs as run() over a block of rows that the caller has just widened or expanded into a buffer (a few
// tens of KB, in L1/L2) for a chunk of tokens, with the loops the other way round: each panel of tokens (RN of them,
// their activations then stay in L1) passes over every 4-row group of the block before the next panel is loaded, so
// the activations are fetched from L2 once per block instead of once per 4-row group. Same tiles, same bits.
template <WKind K>
void run_block(float *out, const float *x, const uint8_t *wbase, int64_t wstride, int64_t r0, int64_t r1, int64_t t0,
               int64_t t1, int64_t m, int64_t k) {
  static const int64_t tokens_per = cpu_has_avx512() ? 6 : 3;
  for (int64_t t = t0; t < t1; t += tokens_per) {
    const int rn = static_cast<int>(std::min<int64_t>(tokens_per, t1 - t));
    for (int64_t r = r0; r < r1; r += 4) {
      const int rm = static_cast<int>(std::min<int64_t>(4, r1 - r));
      pick<K>(rm, rn)(out, x, wbase + (r - r0) * wstride, wstride, r, t, m, k);
    }
  }
}

#endif  // IKV_X86

// Rows widened or expanded per block before run_block: as many as fit in about 64 KB of f32 (a multiple of 4, 4 to
// 32), so the block and a panel of activations sit in L1/L2 together.
inline int64_t block_rows(int64_t k) { return std::clamp<int64_t>((kBlockBytes / (4 * k)) & ~int64_t{3}, 4, 32); }

// ---- Quantised prefill on AVX-512: vectors over tokens ----
// Quantised rows expanded to f32 are multiplied against a transposed panel of kPanel tokens (xt[i * kPanel + j] =
// token j's element i, zero past the last token): per element i, two vector loads of the panel and one broadcast of
// each row's weight feed 2 * RM FMAs, and every output is one plain chain of FMAs over i = 0 .. k-1 in order, with no
// lane sums at the end. 12 rows x 32 tokens keep 24 of AVX-512's 32 registers as accumulators; measured faster
// than tile_avx512 with its data in L1. The sums are in another order than the tiles', so this path
// serves only quantised weights, whose decode (matmul_quant's fused dots) already sums in its own order, and only
// products of 16 tokens or more (a panel's zero padding would cost more than it gains on fewer); f32/f16/bf16
// weights keep the tiles, where a token's result is the same bits alone and batched.
constexpr int64_t kPanel = 32;
constexpr int kPanelRows = 12;

// Tokens per chunk of the panel path (a multiple of kPanel, 64 to 256): their packed panels (about 512 KB) stay in L2
// while a block of rows passes over them; more tokens per chunk spread each row's expansion over more of them
// (measured; packaging/docs/performance.md, "Kernel choices").
inline int64_t panel_chunk(int64_t k) {
  return std::clamp<int64_t>((int64_t{512} * 1024 / (4 * k)) & ~(kPanel - 1), kTokenChunk, 256);
}

// xt = the panel of tokens t0 .. t1-1 (at most `width`) of x [*, k], transposed: xt[i * width + j] = token t0 + j's
// element i, zero past t1. The panel kernel here reads it 64-byte aligned (width kPanel); matmul_grouped.cpp packs
// narrower panels for its broadcasts.
// Full groups of four tokens go 4 x 4 elements at a time through SSE transposes, cheaper than a scalar strided copy
// (measured in F16 prefill); the rest one element at a time.
inline void pack_panel(float *xt, const float *x, int64_t t0, int64_t t1, int64_t k, int64_t width = kPanel) {
#if IKV_X86
  const int64_t quads = (t1 - t0) / 4 * 4, k4 = k & ~int64_t{3};
  for (int64_t j = 0; j < quads; j += 4) {
    const float *r = x + (t0 + j) * k;
    for (int64_t i = 0; i < k4; i += 4) {
      __m128 a = _mm_loadu_ps(r + i), b = _mm_loadu_ps(r + k + i), c = _mm_loadu_ps(r + 2 * k + i),
             d = _mm_loadu_ps(r + 3 * k + i);
      _MM_TRANSPOSE4_PS(a, b, c, d);
      float *o = xt + i * width + j;
      _mm_storeu_ps(o, a);
      _mm_storeu_ps(o + width, b);
      _mm_storeu_ps(o + 2 * width, c);
      _mm_storeu_ps(o + 3 * width, d);
    }
  }
#else
  const int64_t quads = 0, k4 = 0;
#endif
  for (int64_t i = 0; i < k; ++i) {
    float *d = xt + i * width;
    for (int64_t j = i < k4 ? quads : 0; j < t1 - t0; ++j) d[j] = x[(t0 + j) * k + i];
    for (int64_t j = t1 - t0; j < width; ++j) d[j] = 0.0f;
  }
}

// out[(t0 + j) * m + r0 + r] for RM rows (f32, wstride floats apart) and the panel's first nt tokens, NV * 16 of
// the panel's tokens computed (NV = 1 when nt <= 16: the same sums, half the work on a short tail).
#if IKV_X86
template <int RM, int NV>
IKV_TARGET_AVX512 void panel_tile(float *out, const float *xt, const float *w, int64_t wstride, int64_t r0, int64_t t0,
                            int64_t nt, int64_t m, int64_t k) {
  __m512 acc[RM][NV];
  const float *wr[RM];
  for (int r = 0; r < RM; ++r) {
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
    wr[r] = w + r * wstride;
  }
  for (int64_t i = 0; i < k; ++i) {
    __m512 a[NV];
    for (int v = 0; v < NV; ++v) a[v] = _mm512_load_ps(xt + i * kPanel + 16 * v);
    for (int r = 0; r < RM; ++r) {
      const __m512 b = _mm512_set1_ps(wr[r][i]);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(a[v], b, acc[r][v]);
    }
  }
  alignas(64) float res[RM][16 * NV];
  for (int r = 0; r < RM; ++r)
    for (int v = 0; v < NV; ++v) _mm512_store_ps(res[r] + 16 * v, acc[r][v]);
  for (int64_t j = 0; j < nt; ++j)
    for (int r = 0; r < RM; ++r) out[(t0 + j) * m + r0 + r] = res[r][j];
}

using PanelFn = void (*)(float *, const float *, const float *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);

template <int NV>
PanelFn panel_for(int rm) {
  static constexpr PanelFn fns[kPanelRows] = {
      panel_tile<1, NV>, panel_tile<2, NV>, panel_tile<3, NV>, panel_tile<4, NV>,  panel_tile<5, NV>,  panel_tile<6, NV>,
      panel_tile<7, NV>, panel_tile<8, NV>, panel_tile<9, NV>, panel_tile<10, NV>, panel_tile<11, NV>, panel_tile<12, NV>};
  return fns[rm - 1];
}

// Rows r0 .. r1-1 (f32 at w, wstride floats apart) for the tokens of the packed panels xt (panel p holds tokens
// t0 + p * kPanel ..), t0 .. t1-1 in all: each group of kPanelRows rows passes over every panel.
inline void run_panels(float *out, const float *xt, int64_t t0, int64_t t1, const float *w, int64_t wstride,
                       int64_t r0, int64_t r1, int64_t m, int64_t k) {
  for (int64_t r = r0; r < r1; r += kPanelRows) {
    const int rm = static_cast<int>(std::min<int64_t>(kPanelRows, r1 - r));
    for (int64_t t = t0, p = 0; t < t1; t += kPanel, ++p) {
      const int64_t nt = std::min(kPanel, t1 - t);
      (nt > 16 ? panel_for<2>(rm) : panel_for<1>(rm))(out, xt + p * kPanel * k, w + (r - r0) * wstride, wstride, r, t,
                                                      nt, m, k);
    }
  }
}

#endif  // IKV_X86

// Asks for bytes [p, p + n) to be brought into L2, one request per cache line. Prefill widens or expands a block
// of weight rows while the tile works on the previous one from L1: without this the widening stalls on DRAM
// (measured in F16 prefill), with it the fetch overlaps the tile's arithmetic.
inline void prefetch_l2(const uint8_t *p, int64_t n) {
  for (int64_t i = 0; i < n; i += 64) __builtin_prefetch(p + i, 0, 2);  // prefetcht1 on x86
}

// When a product is shared among the pool's threads: not below kShareMacs multiply-adds in all (the hand-off would
// cost more), and then in work items of about kItemMacs multiply-adds (rows_per_item of rows costing macs_per_row).
constexpr int64_t kShareMacs = int64_t{1} << 17;
constexpr int64_t kItemMacs = int64_t{1} << 16;
inline int64_t rows_per_item(int64_t macs_per_row) { return std::max<int64_t>(1, kItemMacs / std::max<int64_t>(1, macs_per_row)); }

// Scratch of n floats owned by the code that makes it (a product call or one of its work items, never hidden in the
// thread: what a thread_local keeps stays allocated for the thread's life, sized by the largest product it ever ran),
// starting on a 64-byte boundary (a 64-byte load from a buffer only 16-byte aligned, what malloc gives, straddles two
// cache lines three times in four) and not initialised. Throws std::bad_alloc.
class Scratch64 {
 public:
  explicit Scratch64(int64_t n) {
    const size_t bytes = (static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float) + 63) / 64 * 64;
    p_ = static_cast<float *>(std::aligned_alloc(64, bytes));
    if (p_ == nullptr) throw std::bad_alloc();
  }
  ~Scratch64() { std::free(p_); }
  Scratch64(const Scratch64 &) = delete;
  Scratch64 &operator=(const Scratch64 &) = delete;
  float *get() const { return p_; }

 private:
  float *p_ = nullptr;
};

}  // namespace tile
}  // namespace cpu
}  // namespace infokv
