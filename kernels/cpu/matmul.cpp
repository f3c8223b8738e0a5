// out[n, m] = x[n, k] · W[m, k]^T for f32/f16/bf16 weights. AVX2+FMA path chosen at run time, portable fallback.
#include "kernels/cpu/simd.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/matmul_quant.hpp"
#include "kernels/cpu/gemm_tile.hpp"
#include "kernels/cpu/matmul_act8.hpp"
#include "kernels/thread_pool.hpp"
#include "kernels/fp16.hpp"
#include "kernels/ggml_types.hpp"
#include "kernels/ops.hpp"

namespace infokv {
namespace cpu {

namespace {

inline float load_w(const float *w, int64_t i) { return w[i]; }
inline float load_w(const uint16_t *w, int64_t i, bool bf16) { return bf16 ? bf16_to_float(w[i]) : fp16_to_float(w[i]); }

// Portable: four independent partial sums per dot product keep the FP dependency chains short.
template <typename W>
void rows_generic(float *out, const float *x, const W *w, int64_t n, int64_t m0, int64_t m1, int64_t m, int64_t k,
                  bool bf16) {
  for (int64_t r = m0; r < m1; ++r) {
    const W *wr = w + r * k;
    for (int64_t t = 0; t < n; ++t) {
      const float *xr = x + t * k;
      float s[4] = {0, 0, 0, 0};
      int64_t i = 0;
      for (; i + 4 <= k; i += 4)
        for (int j = 0; j < 4; ++j) {
          float wv;
          if constexpr (sizeof(W) == 4) wv = load_w(reinterpret_cast<const float *>(wr), i + j);
          else wv = load_w(reinterpret_cast<const uint16_t *>(wr), i + j, bf16);
          s[j] += xr[i + j] * wv;
        }
      float acc = (s[0] + s[1]) + (s[2] + s[3]);
      for (; i < k; ++i) {
        float wv;
        if constexpr (sizeof(W) == 4) wv = load_w(reinterpret_cast<const float *>(wr), i);
        else wv = load_w(reinterpret_cast<const uint16_t *>(wr), i, bf16);
        acc += xr[i] * wv;
      }
      out[t * m + r] = acc;
    }
  }
}

using tile::WKind;

#if IKV_X86
// k f16/bf16 weights widened to f32 (exactly).
template <WKind K>
IKV_TARGET_AVX2 void widen_row(float *dst, const uint8_t *src, int64_t k) {
  const int64_t k8 = k & ~int64_t{7};
  for (int64_t i = 0; i < k8; i += 8) _mm256_storeu_ps(dst + i, tile::load8(src, i, K));
  for (int64_t i = k8; i < k; ++i) dst[i] = tile::load1(src, i, K);
}

// f32 weights are read in place, tokens in chunks that stay in L2. f16/bf16 weights are read in place (widened in
// registers) for fewer than 4 tokens; for more, a block of rows at a time (tile::block_rows) is widened into a
// per-work-item f32 buffer once per token chunk, so the tile's inner loop does no conversion. The weights' values are
// the same either way, so are the results' bits.
template <WKind K>
void rows_avx2(float *out, const float *x, const void *w, int64_t n, int64_t m0, int64_t m1, int64_t m, int64_t k) {
  const int64_t stride = k * (K == WKind::f32 ? 4 : 2);
  const uint8_t *wb = static_cast<const uint8_t *>(w) + m0 * stride;
  if (K == WKind::f32 || n < 4) {
    for (int64_t tc = 0; tc < n; tc += tile::kTokenChunk)
      tile::run<K>(out, x, wb, stride, m0, m1, tc, std::min(n, tc + tile::kTokenChunk), m, k);
    return;
  }
  const int64_t rows = tile::block_rows(k);  // per widened block
  const tile::Scratch64 scratch(rows * k);  // this work item's
  float *const buf = scratch.get();
  for (int64_t tc = 0; tc < n; tc += tile::kTokenChunk) {
    const int64_t te = std::min(n, tc + tile::kTokenChunk);
    for (int64_t r = m0; r < m1; r += rows) {
      const int64_t re = std::min(m1, r + rows);
      if (re < m1) tile::prefetch_l2(wb + (re - m0) * stride, (std::min(m1, re + rows) - re) * stride);
      for (int64_t i = r; i < re; ++i) widen_row<K>(buf + (i - r) * k, wb + (i - m0) * stride, k);
      tile::run_block<WKind::f32>(out, x, reinterpret_cast<const uint8_t *>(buf), k * 4, r, re, tc, te, m, k);
    }
  }
}

#endif  // IKV_X86

}  // namespace

bool matmul(float *out, const float *x, const void *w, uint32_t w_type, int64_t n, int64_t m, int64_t k, ThreadPool *pool) {
  if (w_type == kF16Grouped || w_type == kBf16Grouped) return matmul_grouped(out, x, w, w_type, n, m, k, pool);
  WKind kind;
  switch (static_cast<GgmlType>(w_type)) {
    case GgmlType::F32: kind = WKind::f32; break;
    case GgmlType::F16: kind = WKind::f16; break;
    case GgmlType::BF16: kind = WKind::bf16; break;
    default: return matmul_quant(out, x, w, w_type, n, m, k, pool);
  }
  auto body = [&](int64_t m0, int64_t m1) {
#if IKV_X86
    if (cpu_has_avx2_fma_f16c()) {
      switch (kind) {
        case WKind::f32: rows_avx2<WKind::f32>(out, x, w, n, m0, m1, m, k); break;
        case WKind::f16: rows_avx2<WKind::f16>(out, x, w, n, m0, m1, m, k); break;
        case WKind::bf16: rows_avx2<WKind::bf16>(out, x, w, n, m0, m1, m, k); break;
        default: break;  // not a weight kind
      }
      return;
    }
#endif
    if (kind == WKind::f32) {
      rows_generic(out, x, static_cast<const float *>(w), n, m0, m1, m, k, false);
    } else {
      rows_generic(out, x, static_cast<const uint16_t *>(w), n, m0, m1, m, k, kind == WKind::bf16);
    }
  };
  // Share the rows among threads only when each gets enough multiply-adds to pay for the hand-off.
  const int64_t work = n * m * k;
  if (pool == nullptr || pool->size() <= 1 || work < tile::kShareMacs) {
    body(0, m);
  } else {
    pool->parallel_for(m, tile::rows_per_item(n * k), body);
  }
  return true;
}

namespace {

// Rows per unit of a part's row range (a grouped matrix splits only at its 32-row groups) and the bytes of one
// unit; false for a type matmul does not take or a k it cannot split into blocks.
bool part_units(uint32_t type, int64_t k, int64_t *rows, int64_t *bytes) {
  if (type == kF16Grouped || type == kBf16Grouped) {
    *rows = kWeightGroup;
    *bytes = kWeightGroup * k * 2;
    return true;
  }
  if (!weight_type_supported(type)) return false;
  const GgmlTypeTraits t = ggml_type_traits(type);
  if (t.name == nullptr || t.block_elems == 0 || k % t.block_elems != 0) return false;
  *rows = 1;
  *bytes = k / t.block_elems * t.block_bytes;
  return true;
}

}  // namespace

bool matmul_parts(const MatmulPart *parts, int count, const float *x, int64_t n, int64_t k, ThreadPool *pool) {
  if (count <= 0) return true;
  std::vector<int64_t> unit_rows(static_cast<size_t>(count)), unit_bytes(unit_rows.size()), first(unit_rows.size() + 1, 0);
  for (int i = 0; i < count; ++i) {
    if (!part_units(parts[i].type, k, &unit_rows[static_cast<size_t>(i)], &unit_bytes[static_cast<size_t>(i)])) return false;
    const int64_t ur = unit_rows[static_cast<size_t>(i)];
    first[static_cast<size_t>(i) + 1] = first[static_cast<size_t>(i)] + (parts[i].m + ur - 1) / ur;
  }
  const int64_t total = first.back();
  int64_t rows = 0;
  for (int i = 0; i < count; ++i) rows += parts[i].m;
  // Batched products keep their own split (each part's outputs are [n, m], so a row range is not one span of them);
  // so do products too small to share at all.
  if (n != 1 || pool == nullptr || pool->size() <= 1 || count == 1 || rows * k < tile::kShareMacs) {
    for (int i = 0; i < count; ++i)
      if (!matmul(parts[i].out, x, parts[i].w, parts[i].type, n, parts[i].m, k, pool)) return false;
    return true;
  }
  // Parts whose decode takes integer activations (matmul_act8.hpp) get x quantised once here, for all the threads,
  // instead of once per work item; parts of the same type share it. The rows are then the same bits as matmul's.
  std::vector<Act8> acts(static_cast<size_t>(count));
  std::vector<const Act8 *> act_of(static_cast<size_t>(count), nullptr);
  for (int i = 0; i < count; ++i) {
    int planes = 0;
    if (!act8_decode(parts[i].type, k, &planes)) continue;
    for (int j = 0; j < i && act_of[static_cast<size_t>(i)] == nullptr; ++j)
      if (act_of[static_cast<size_t>(j)] != nullptr && parts[j].type == parts[i].type) act_of[static_cast<size_t>(i)] = act_of[static_cast<size_t>(j)];
    if (act_of[static_cast<size_t>(i)] != nullptr) continue;
    act8_quantize(x, k, parts[i].type, planes, &acts[static_cast<size_t>(i)]);
    act_of[static_cast<size_t>(i)] = &acts[static_cast<size_t>(i)];
  }
  // Units [a, b) of the concatenated range: each part's share computed by matmul on this thread, over the rows
  // from its first unit in the range (a row's result does not depend on the rows computed beside it).
  std::atomic<bool> ok{true};
  auto body = [&](int64_t a, int64_t b) {
    for (int i = 0; i < count; ++i) {
      const size_t s = static_cast<size_t>(i);
      const int64_t lo = std::max(a, first[s]), hi = std::min(b, first[s + 1]);
      if (lo >= hi) continue;
      const int64_t u0 = lo - first[s], r0 = u0 * unit_rows[s], r1 = std::min(parts[i].m, (hi - first[s]) * unit_rows[s]);
      const auto *w = static_cast<const uint8_t *>(parts[i].w) + u0 * unit_bytes[s];
      if (act_of[s] != nullptr) act8_rows(parts[i].out + r0, *act_of[s], w, parts[i].type, r1 - r0);
      else if (!matmul(parts[i].out + r0, x, w, parts[i].type, 1, r1 - r0, k, nullptr)) ok.store(false);
    }
  };
  // about 64K multiply-adds of a row's worth per work item, as matmul takes for a lone token
  const int64_t avg_unit_rows = std::max<int64_t>(1, rows / std::max<int64_t>(1, total));
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / (k * avg_unit_rows));
  pool->parallel_for(total, grain, body);
  return ok.load();
}

}  // namespace cpu
}  // namespace infokv
