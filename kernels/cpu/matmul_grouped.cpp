// f16/bf16 weights in the CPU's grouped layout (kernels/ops.hpp, kWeightGroup): out[n, m] = x[n, k] · W[m, k]^T with
// every output one chain of FMAs over i = 0 .. k-1 in order, starting from +0, vectorised over the rows of a group.
// Decode and prefill differ only in how many rows and tokens a tile holds, and each lane does the same IEEE operations
// in every tile, so a token's result is the same bits alone and batched, on any thread count, and on the AVX-512,
// AVX2 and portable kernels alike. Against row-major weights (matmul.cpp's tiles) this needs no lane sums at the end
// of a tile: prefill is a broadcast-style microkernel (one weight vector load per 12 tokens, the activations packed
// into transposed panels), and decode reads each group as one sequential stream, one cache line per element.
#include "kernels/cpu/simd.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/matmul_quant.hpp"
#include "kernels/cpu/gemm_tile.hpp"
#include "kernels/thread_pool.hpp"
#include "kernels/ggml_types.hpp"
#include "kernels/ops.hpp"

namespace infokv {
namespace cpu {

namespace {

using tile::WKind;
constexpr int64_t kG = kWeightGroup;

// Tokens per panel of the prefill tiles: 2 x 12 accumulators of 16 lanes fill most of AVX-512's 32 registers, 2 x 6
// of 8 lanes most of AVX2's 16.
constexpr int64_t kPanel512 = 12;
constexpr int64_t kPanel256 = 6;
// Products of fewer tokens than this take the decode tiles (more rows, no panels).
constexpr int64_t kDecodeTokens = 4;
// Elements (cache lines of a group) that decode asks for ahead of the one it reads, 4 KB: among the best of 1 to 8 KB
// measured on F16 decode (packaging/docs/performance.md, "Kernel choices").
constexpr int64_t kAheadLines = 64;

// Weights: element i of a group's lane j at wg[i * kG + j]. A tile covers the rows r0 .. r0 + W * NV - 1 (r0 a
// multiple of W, all in one group), vector v's weights at wv[v]. Panel: xp[i * P + t] is element i of the tile's
// token t. Results go to out[t * m + row] for the rows below m. Ahead (decode): the group's line kAheadLines
// elements on is asked for at each element.
using GTile = void (*)(float *out, const float *xp, int64_t P, const uint16_t *const *wv, int64_t r0, int64_t m,
                       int64_t k);

#if IKV_X86

template <WKind K, int NV, int RN, bool Ahead>
IKV_TARGET_AVX2 void tile_avx2(float *out, const float *xp, int64_t P, const uint16_t *const *wv, int64_t r0, int64_t m,
                            int64_t k) {
  __m256 acc[NV][RN];
  for (int v = 0; v < NV; ++v)
    for (int t = 0; t < RN; ++t) acc[v][t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < k; ++i) {
    __m256 w[NV];
    for (int v = 0; v < NV; ++v) {
      if (Ahead && v == 0) _mm_prefetch(reinterpret_cast<const char *>(wv[v] + (i + kAheadLines) * kG), _MM_HINT_T0);
      w[v] = tile::load8(wv[v], i * kG, K);
    }
    for (int t = 0; t < RN; ++t) {
      const __m256 b = _mm256_broadcast_ss(xp + i * P + t);
      for (int v = 0; v < NV; ++v) acc[v][t] = _mm256_fmadd_ps(w[v], b, acc[v][t]);
    }
  }
  const int64_t valid = m - r0;
  for (int t = 0; t < RN; ++t)
    for (int v = 0; v < NV; ++v) {
      float *o = out + t * m + r0 + 8 * v;
      if (valid >= 8 * (v + 1)) {
        _mm256_storeu_ps(o, acc[v][t]);
      } else if (valid > 8 * v) {
        alignas(32) float tmp[8];
        _mm256_store_ps(tmp, acc[v][t]);
        std::memcpy(o, tmp, static_cast<size_t>(valid - 8 * v) * 4);
      }
    }
}

template <WKind K, int NV, int RN, bool Ahead>
IKV_TARGET_AVX512 void tile_avx512(float *out, const float *xp, int64_t P, const uint16_t *const *wv, int64_t r0, int64_t m,
                             int64_t k) {
  __m512 acc[NV][RN];
  for (int v = 0; v < NV; ++v)
    for (int t = 0; t < RN; ++t) acc[v][t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < k; ++i) {
    __m512 w[NV];
    for (int v = 0; v < NV; ++v) {
      if (Ahead && v == 0) _mm_prefetch(reinterpret_cast<const char *>(wv[v] + (i + kAheadLines) * kG), _MM_HINT_T0);
      w[v] = tile::load16(wv[v], i * kG, K);
    }
    for (int t = 0; t < RN; ++t) {
      const __m512 b = _mm512_set1_ps(xp[i * P + t]);
      for (int v = 0; v < NV; ++v) acc[v][t] = _mm512_fmadd_ps(w[v], b, acc[v][t]);
    }
  }
  const int64_t valid = m - r0;
  for (int t = 0; t < RN; ++t)
    for (int v = 0; v < NV; ++v) {
      float *o = out + t * m + r0 + 16 * v;
      if (valid >= 16 * (v + 1)) _mm512_storeu_ps(o, acc[v][t]);
      else if (valid > 16 * v) _mm512_mask_storeu_ps(o, static_cast<__mmask16>((1u << (valid - 16 * v)) - 1), acc[v][t]);
    }
}

template <WKind K, int NV, bool Wide, bool Ahead, int RN>
constexpr GTile tile_ptr() {
  if constexpr (Wide) return tile_avx512<K, NV, RN, Ahead>;
  else return tile_avx2<K, NV, RN, Ahead>;
}

template <WKind K, int NV, bool Wide, bool Ahead, int... RN>
GTile tile_at(int rn, std::integer_sequence<int, RN...>) {
  static constexpr GTile fns[] = {tile_ptr<K, NV, Wide, Ahead, RN + 1>()...};
  return fns[rn - 1];
}

// The tile of NV vectors for rn tokens (1 .. kPanel512 with AVX-512, 1 .. kPanel256 with AVX2).
template <WKind K, int NV, bool Wide, bool Ahead>
GTile tile_for(int rn) {
  return tile_at<K, NV, Wide, Ahead>(rn, std::make_integer_sequence<int, Wide ? kPanel512 : kPanel256>{});
}

// Groups g0 .. g1-1 for n < kDecodeTokens tokens, xp = [k][n]: a group a tile (two chains of 16 lanes per token with
// AVX-512, four of 8 with AVX2), read as one sequential stream a cache line per element and asked for ahead. One
// stream measured faster than two groups side by side (packaging/docs/performance.md, "Kernel choices"), and two
// chains per token still outrun the memory.
template <WKind K, bool Wide>
void decode_groups(float *out, const float *xp, const uint16_t *w, int64_t n, int64_t g0, int64_t g1, int64_t m,
                   int64_t k) {
  constexpr int NV = Wide ? 2 : 4;
  constexpr int64_t lanes = kG / NV;
  const GTile fn = tile_for<K, NV, Wide, true>(static_cast<int>(n));
  for (int64_t g = g0; g < g1; ++g) {
    const uint16_t *wv[NV];
    for (int v = 0; v < NV; ++v) wv[v] = w + g * k * kG + v * lanes;
    fn(out, xp, n, wv, g * kG, m, k);
  }
}

// Tokens per chunk of the prefill loop (a multiple of the panel): their panels (about 256 KB) stay in L2 while the
// groups pass over them, each group's weights (kG * k halves, 36 KB at k = 576) then reused by every panel.
int64_t chunk_tokens(int64_t k, int64_t panel) {
  return std::max<int64_t>(panel, (int64_t{256} * 1024 / (4 * k)) / panel * panel);
}

// Groups g0 .. g1-1 for the nt tokens packed in panels xt (panel p at xt + p * P * k): a tile is a group (AVX-512) or
// half of one (AVX2) times a panel; the next group's weights are fetched into L2 while one works.
template <WKind K, bool Wide>
void prefill_groups(float *out, const float *xt, const uint16_t *w, int64_t nt, int64_t g0, int64_t g1, int64_t m,
                    int64_t k) {
  constexpr int64_t P = Wide ? kPanel512 : kPanel256, lanes = Wide ? 16 : 8, halves = Wide ? 1 : 2;
  const int64_t chunk = chunk_tokens(k, P);
  for (int64_t c = 0; c < nt; c += chunk) {
    const int64_t ce = std::min(nt, c + chunk);
    for (int64_t g = g0; g < g1; ++g) {
      const uint16_t *wg = w + g * k * kG;
      if (g + 1 < g1) tile::prefetch_l2(reinterpret_cast<const uint8_t *>(wg + k * kG), k * kG * 2);
      for (int64_t t = c; t < ce; t += P) {
        const int rn = static_cast<int>(std::min(P, ce - t));
        const GTile fn = tile_for<K, 2, Wide, false>(rn);
        for (int64_t h = 0; h < halves; ++h) {
          const uint16_t *wv[2] = {wg + 2 * lanes * h, wg + 2 * lanes * h + lanes};
          fn(out + t * m, xt + t * k, P, wv, g * kG + 2 * lanes * h, m, k);
        }
      }
    }
  }
}

#endif  // IKV_X86

// Any CPU: the same chains one lane at a time (std::fma is the fused operation the vector kernels do).
void groups_portable(float *out, const float *x, const uint16_t *w, WKind kind, int64_t n, int64_t g0, int64_t g1,
                     int64_t m, int64_t k) {
  float acc[kG];
  for (int64_t g = g0; g < g1; ++g) {
    const uint16_t *wg = w + g * k * kG;
    const int64_t rows = std::min(kG, m - g * kG);
    for (int64_t t = 0; t < n; ++t) {
      const float *xr = x + t * k;
      std::fill(acc, acc + kG, 0.0f);
      for (int64_t i = 0; i < k; ++i) {
        const float xv = xr[i];
        for (int64_t j = 0; j < rows; ++j) acc[j] = std::fma(tile::load1(wg, i * kG + j, kind), xv, acc[j]);
      }
      std::copy(acc, acc + rows, out + t * m + g * kG);
    }
  }
}

#if IKV_X86
using GroupsFn = void (*)(float *, const float *, const uint16_t *, int64_t, int64_t, int64_t, int64_t, int64_t);

template <WKind K>
GroupsFn groups_fn(bool decode, bool wide) {
  if (decode) return wide ? decode_groups<K, true> : decode_groups<K, false>;
  return wide ? prefill_groups<K, true> : prefill_groups<K, false>;
}
#endif  // IKV_X86

}  // namespace

uint32_t grouped_type(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::F16: return kF16Grouped;
    case GgmlType::BF16: return kBf16Grouped;
    default: return 0;
  }
}

int64_t grouped_elems(int64_t m, int64_t k) { return (m + kG - 1) / kG * kG * k; }

void group_rows(uint16_t *dst, const uint16_t *w, int64_t m, int64_t k, ThreadPool *pool) {
  constexpr int64_t kSpan = 64;  // elements of the group's 32 rows copied at a time (4 KB in, 4 KB out)
  auto body = [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      uint16_t *d = dst + g * k * kG;
      const int64_t rows = std::min(kG, m - g * kG);
      for (int64_t i0 = 0; i0 < k; i0 += kSpan) {
        const int64_t i1 = std::min(k, i0 + kSpan);
        for (int64_t j = 0; j < kG; ++j) {
          const uint16_t *s = w + (g * kG + j) * k;
          for (int64_t i = i0; i < i1; ++i) d[i * kG + j] = j < rows ? s[i] : uint16_t{0};
        }
      }
    }
  };
  const int64_t groups = (m + kG - 1) / kG;
  if (pool == nullptr || pool->size() <= 1) body(0, groups);
  else pool->parallel_for(groups, 16, body);
}

bool matmul_grouped(float *out, const float *x, const void *w, uint32_t w_type, int64_t n, int64_t m, int64_t k,
                    ThreadPool *pool) {
  WKind kind;
  if (w_type == kF16Grouped) kind = WKind::f16;
  else if (w_type == kBf16Grouped) kind = WKind::bf16;
  else return false;
  const auto *wg = static_cast<const uint16_t *>(w);
  const int64_t groups = (m + kG - 1) / kG;
  const bool pool_on = pool != nullptr && pool->size() > 1 && n * m * k >= tile::kShareMacs;
  const int64_t grain = tile::rows_per_item(n * k * kG);
  // prefill: 16 chunks per thread, so that 18 groups (SmolLM2's 576 rows) split evenly over 2 threads (measured:
  // packaging/docs/performance.md, "Kernel choices"); decode keeps 4, each hand-off costing more than it saves
  const int per_thread = n < kDecodeTokens ? 4 : 16;
  auto share = [&](const std::function<void(int64_t, int64_t)> &body) {
    if (pool_on) pool->parallel_for(groups, grain, body, per_thread);
    else body(0, groups);
  };
  if (!IKV_X86 || !cpu_has_avx2_fma_f16c()) {
    share([&](int64_t g0, int64_t g1) { groups_portable(out, x, wg, kind, n, g0, g1, m, k); });
    return true;
  }
#if IKV_X86
  const bool wide = cpu_has_avx512();
  const bool decode = n < kDecodeTokens;
  const GroupsFn fn = kind == WKind::f16 ? groups_fn<WKind::f16>(decode, wide) : groups_fn<WKind::bf16>(decode, wide);
  if (decode) {
    // xp = [k][n]: the token itself when alone, else its n rows interleaved
    std::vector<float> xp_;  // this product's
    const float *xp = x;
    if (n > 1) {
      xp_.resize(static_cast<size_t>(n * k));
      for (int64_t i = 0; i < k; ++i)
        for (int64_t t = 0; t < n; ++t) xp_[static_cast<size_t>(i * n + t)] = x[t * k + i];
      xp = xp_.data();
    }
    share([&](int64_t g0, int64_t g1) { fn(out, xp, wg, n, g0, g1, m, k); });
    return true;
  }
  // Tokens kSpan at a time, packed into panels of P (shared by the threads; the last one zero-padded), then every
  // group over them.
  constexpr int64_t kSpan = 512;
  const int64_t P = wide ? kPanel512 : kPanel256;
  const tile::Scratch64 scratch((std::min(n, kSpan) + P) * k);  // this product's
  float *const xt = scratch.get();
  for (int64_t s = 0; s < n; s += kSpan) {
    const int64_t ns = std::min(kSpan, n - s), np = (ns + P - 1) / P;
    auto pack = [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) tile::pack_panel(xt + p * P * k, x + s * k, p * P, std::min(ns, (p + 1) * P), k, P);
    };
    if (pool_on) pool->parallel_for(np, 1, pack);
    else pack(0, np);
    share([&](int64_t g0, int64_t g1) { fn(out + s * m, xt, wg, ns, g0, g1, m, k); });
  }
#endif  // IKV_X86
  return true;
}

bool get_row_grouped(float *out, const void *w, uint32_t type, int64_t row, int64_t d) {
  WKind kind;
  if (type == kF16Grouped) kind = WKind::f16;
  else if (type == kBf16Grouped) kind = WKind::bf16;
  else return false;
  const uint16_t *g = static_cast<const uint16_t *>(w) + row / kG * d * kG + row % kG;
  for (int64_t i = 0; i < d; ++i) out[i] = tile::load1(g, i * kG, kind);
  return true;
}

}  // namespace cpu
}  // namespace infokv
