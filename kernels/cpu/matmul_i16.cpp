// Prefill products with integer activations (see matmul_i16.hpp). Layout:
//  - a group of kLanes = 32 tokens is packed once per product (per span of 512 tokens): xq[k / 2][32] 32-bit words,
//    word (p, j) holding token
//    j's codes 2p and 2p + 1 as two int16; dx[k / 32][32] their scales; sx[k / 32][32] their exact sums;
//  - a block of weight rows is unpacked into per-work-item scratch (owned by the item, not hidden in the thread):
//    k int16 codes per row, one float scale per scale group (32 values; 16 for Q6_K), one min factor per 32;
//  - the tile: RM rows x 32 tokens, two 16-lane vectors per row (lanes are tokens), one broadcast of a row's code pair
//    feeding two vpdpwssd per pair of k; after each scale group the integer sums are converted and folded into the
//    float accumulators with one multiply-add.
#include "kernels/cpu/simd.hpp"

#include "kernels/cpu/matmul_i16.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/gemm_tile.hpp"
#include "kernels/dequant.hpp"
#include "kernels/ggml_blocks.hpp"
#include "kernels/ggml_types.hpp"
#include "kernels/thread_pool.hpp"

namespace infokv {
namespace cpu {

namespace {

constexpr int64_t kLanes = 32;  // tokens per packed group (two 16-lane vectors)

// A covered type's geometry: elements and bytes per block, values per float scale (32, or 16 for Q6_K), and whether
// it has a min (a second float per 32 values, times the sum of x).
struct Shape {
  int64_t qk = 0, bb = 0;
  int g = 32;
  bool mins = false;
};

// Values per float scale: 16 for Q6_K (a scale per 16), 32 for the rest.
constexpr int scale_group(GgmlType t) { return t == GgmlType::Q6_K ? 16 : 32; }

// The block geometry comes from ggml_type_traits; the scale group and the min are this kernel's view of each type.
bool shape_of(uint32_t type, Shape *s) {
  bool mins = false;
  const GgmlType t = static_cast<GgmlType>(type);
  switch (t) {
    case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0: case GgmlType::Q6_K: break;
    case GgmlType::Q4_1: case GgmlType::Q5_1: case GgmlType::Q4_K: case GgmlType::Q5_K: mins = true; break;
    default: return false;
  }
  const GgmlTypeTraits tr = ggml_type_traits(type);
  *s = {tr.block_elems, tr.block_bytes, scale_group(t), mins};
  return true;
}

// ---- Weight rows: codes, scales, mins ----
// Each unpacker writes one block's codes c[qk], scales a[qk / g] and min factors bm[qk / 32] (w = a * c + bm, per
// group); simple loops, always inlined so that the vector path's copy is compiled for its ISA and vectorised.

#define IKV_I16_INLINE inline __attribute__((always_inline))

IKV_I16_INLINE void unpack_q4_0(const uint8_t *b, int16_t *c, float *a, float *) {
  const uint8_t *qs = b + offsetof(block::Q4_0, qs);
  for (int j = 0; j < 16; ++j) {
    c[j] = static_cast<int16_t>((qs[j] & 0x0F) - 8);
    c[j + 16] = static_cast<int16_t>((qs[j] >> 4) - 8);
  }
  a[0] = dq::h2f(b);
}

IKV_I16_INLINE void unpack_q4_1(const uint8_t *b, int16_t *c, float *a, float *bm) {
  const uint8_t *qs = b + offsetof(block::Q4_1, qs);
  for (int j = 0; j < 16; ++j) {
    c[j] = static_cast<int16_t>(qs[j] & 0x0F);
    c[j + 16] = static_cast<int16_t>(qs[j] >> 4);
  }
  a[0] = dq::h2f(b);
  bm[0] = dq::h2f(b + offsetof(block::Q4_1, m));
}

template <bool Min>
IKV_I16_INLINE void unpack_q5(const uint8_t *b, int16_t *c, float *a, float *bm) {
  uint32_t qh;
  std::memcpy(&qh, b + (Min ? offsetof(block::Q5_1, qh) : offsetof(block::Q5_0, qh)), 4);
  const uint8_t *qs = b + (Min ? offsetof(block::Q5_1, qs) : offsetof(block::Q5_0, qs));
  const int off = Min ? 0 : 16;
  for (int j = 0; j < 16; ++j) {
    const int h0 = static_cast<int>(((qh >> j) << 4) & 0x10), h1 = static_cast<int>((qh >> (j + 12)) & 0x10);
    c[j] = static_cast<int16_t>(((qs[j] & 0x0F) | h0) - off);
    c[j + 16] = static_cast<int16_t>(((qs[j] >> 4) | h1) - off);
  }
  a[0] = dq::h2f(b);
  if (Min) bm[0] = dq::h2f(b + offsetof(block::Q5_1, m));
}

IKV_I16_INLINE void unpack_q8_0(const uint8_t *b, int16_t *c, float *a, float *) {
  const auto *qs = reinterpret_cast<const int8_t *>(b + offsetof(block::Q8_0, qs));
  for (int j = 0; j < 32; ++j) c[j] = qs[j];
  a[0] = dq::h2f(b);
}

template <bool Five>
IKV_I16_INLINE void unpack_k4(const uint8_t *b, int16_t *c, float *a, float *bm) {
  const float d = dq::h2f(b), dmin = dq::h2f(b + offsetof(block::Q4_K, dmin));
  const uint8_t *scales = b + offsetof(block::Q4_K, scales), *qh = b + offsetof(block::Q5_K, qh),
                *ql = b + (Five ? offsetof(block::Q5_K, qs) : offsetof(block::Q4_K, qs));
  for (int j = 0; j < 4; ++j, ql += 32) {
    float d1, m1, d2, m2;
    dq::pair_scales_k4(2 * j, scales, d, dmin, &d1, &m1, &d2, &m2);
    int16_t *c1 = c + 64 * j, *c2 = c1 + 32;
    for (int l = 0; l < 32; ++l) {
      c1[l] = static_cast<int16_t>(ql[l] & 0x0F);
      c2[l] = static_cast<int16_t>(ql[l] >> 4);
      if (Five) {
        c1[l] = static_cast<int16_t>(c1[l] + (((qh[l] >> (2 * j)) & 1) << 4));
        c2[l] = static_cast<int16_t>(c2[l] + (((qh[l] >> (2 * j + 1)) & 1) << 4));
      }
    }
    a[2 * j] = d1;
    a[2 * j + 1] = d2;
    bm[2 * j] = -m1;
    bm[2 * j + 1] = -m2;
  }
}

IKV_I16_INLINE void unpack_q6_k(const uint8_t *b, int16_t *c, float *a, float *) {
  int8_t q[256];
  dq::q6_k_codes(b, q);
  for (int i = 0; i < 256; ++i) c[i] = q[i];
  const auto *sc = reinterpret_cast<const int8_t *>(b + offsetof(block::Q6_K, scales));
  const float d = dq::h2f(b + offsetof(block::Q6_K, d));
  for (int g = 0; g < 16; ++g) a[g] = d * static_cast<float>(sc[g]);
}

using UnpackFn = void (*)(const uint8_t *, int16_t *, float *, float *);

// One row of k elements: codes c[k], scales a[k / g], min factors bm[k / 32] (left alone for types without).
template <UnpackFn F, GgmlType T>
IKV_I16_INLINE void unpack_row_t(const uint8_t *row, int64_t k, int16_t *c, float *a, float *bm) {
  constexpr int64_t QK = ggml_type_traits(static_cast<uint32_t>(T)).block_elems;
  constexpr int64_t BB = ggml_type_traits(static_cast<uint32_t>(T)).block_bytes;
  constexpr int G = scale_group(T);
  static_assert(QK % G == 0 && QK % 32 == 0, "a block holds whole scale groups");
  for (int64_t b = 0; b < k / QK; ++b) F(row + b * BB, c + b * QK, a + b * (QK / G), bm + b * (QK / 32));
}

// Rows [r0, r1) of w (row_bytes each) unpacked, row i - r0 at c + (i - r0) * k, a + (i - r0) * (k / g), bm + ... k / 32.
struct RowsUnpack {
  const uint8_t *w;
  int64_t row_bytes, r0, r1, k;
  int16_t *c;
  float *a, *bm;
  template <UnpackFn F, GgmlType T>
  IKV_I16_INLINE void go() const {
    constexpr int G = scale_group(T);
    for (int64_t i = r0; i < r1; ++i)
      unpack_row_t<F, T>(w + i * row_bytes, k, c + (i - r0) * k, a + (i - r0) * (k / G), bm + (i - r0) * (k / 32));
  }
};

IKV_I16_INLINE void unpack_dispatch(uint32_t type, const RowsUnpack &u) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::Q4_0: u.go<unpack_q4_0, GgmlType::Q4_0>(); break;
    case GgmlType::Q4_1: u.go<unpack_q4_1, GgmlType::Q4_1>(); break;
    case GgmlType::Q5_0: u.go<unpack_q5<false>, GgmlType::Q5_0>(); break;
    case GgmlType::Q5_1: u.go<unpack_q5<true>, GgmlType::Q5_1>(); break;
    case GgmlType::Q8_0: u.go<unpack_q8_0, GgmlType::Q8_0>(); break;
    case GgmlType::Q4_K: u.go<unpack_k4<false>, GgmlType::Q4_K>(); break;
    case GgmlType::Q5_K: u.go<unpack_k4<true>, GgmlType::Q5_K>(); break;
    case GgmlType::Q6_K: u.go<unpack_q6_k, GgmlType::Q6_K>(); break;
    default: break;
  }
}

void unpack_rows_portable(uint32_t type, const RowsUnpack &u) { unpack_dispatch(type, u); }

// ---- Activations ----
// Tokens [0, nt) of x (nt <= kLanes) into one packed group; lanes past nt are zero (their outputs are never stored).
// The reference's packing; pack_group_vnni computes the same values with vectors (tests compare the products' bits).
void pack_group(const float *x, int64_t nt, int64_t k, int32_t qmax, int32_t *xq, float *dx, float *sx) {
  const int64_t nb = k / 32;
  std::memset(xq, 0, static_cast<size_t>(k / 2 * kLanes) * sizeof(int32_t));
  std::memset(dx, 0, static_cast<size_t>(nb * kLanes) * sizeof(float));
  std::memset(sx, 0, static_cast<size_t>(nb * kLanes) * sizeof(float));
  const float fmax = static_cast<float>(qmax);
  for (int64_t j = 0; j < nt; ++j) {
    const float *xt = x + j * k;
    for (int64_t b = 0; b < nb; ++b) {
      const float *xb = xt + 32 * b;
      float amax = 0.0f, s = 0.0f;
      bool bad = false;
      for (int i = 0; i < 32; ++i) {
        bad = bad || !std::isfinite(xb[i]);
        amax = std::max(amax, std::fabs(xb[i]));
        s += xb[i];
      }
      float d = amax / fmax, id = d != 0.0f ? 1.0f / d : 0.0f;
      // a scale too small to invert (max|x| under about 1e-34: 1 / d infinite, 0 * inf NaN): a block of zeros
      if (!(id <= std::numeric_limits<float>::max())) d = id = 0.0f;
      if (bad) {  // NaN or Inf in x: the outputs become NaN (through d), as the f32 path's would
        d = std::numeric_limits<float>::quiet_NaN();
        id = 0.0f;
      }
      dx[b * kLanes + j] = d;
      sx[b * kLanes + j] = s;
      if (bad) continue;  // codes 0
      for (int i = 0; i < 32; i += 2) {
        const auto q0 = static_cast<int32_t>(std::clamp(std::nearbyint(xb[i] * id), -fmax, fmax));
        const auto q1 = static_cast<int32_t>(std::clamp(std::nearbyint(xb[i + 1] * id), -fmax, fmax));
        xq[(16 * b + i / 2) * kLanes + j] =
            static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(q0)) | (static_cast<uint32_t>(static_cast<uint16_t>(q1)) << 16));
      }
    }
  }
}

// Packed groups of a product: group p of tokens [32p, 32p + 32) at xq + p * k / 2 * kLanes, dx/sx + p * k / 32 * kLanes.
struct Packed {
  std::vector<int32_t> xq;
  std::vector<float> dx, sx;
  int64_t groups = 0, k = 0;
  const int32_t *q(int64_t p) const { return xq.data() + p * (k / 2) * kLanes; }
  const float *d(int64_t p) const { return dx.data() + p * (k / 32) * kLanes; }
  const float *s(int64_t p) const { return sx.data() + p * (k / 32) * kLanes; }
};

using PackFn = void (*)(const float *, int64_t, int64_t, int32_t, int32_t *, float *, float *);

void pack_all(PackFn pack, const float *x, int64_t n, int64_t k, int32_t qmax, Packed *pk, ThreadPool *pool) {
  pk->k = k;
  pk->groups = (n + kLanes - 1) / kLanes;
  pk->xq.resize(static_cast<size_t>(pk->groups * (k / 2) * kLanes));
  pk->dx.resize(static_cast<size_t>(pk->groups * (k / 32) * kLanes));
  pk->sx.resize(pk->dx.size());
  auto body = [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      pack(x + p * kLanes * k, std::min(kLanes, n - p * kLanes), k, qmax, pk->xq.data() + p * (k / 2) * kLanes,
                 pk->dx.data() + p * (k / 32) * kLanes, pk->sx.data() + p * (k / 32) * kLanes);
  };
  if (pool != nullptr && pool->size() > 1 && pk->groups > 1) pool->parallel_for(pk->groups, 1, body);
  else body(0, pk->groups);
}

// ---- The reference: one output ----
float dot_ref(const Packed &pk, int64_t p, int64_t j, const int16_t *c, const float *a, const float *bm, int g, bool mins) {
  const int32_t *xq = pk.q(p);
  const float *dx = pk.d(p), *sx = pk.s(p);
  float acc = 0.0f;
  for (int64_t b = 0; b < pk.k / 32; ++b) {
    for (int s = 0; s < 32 / g; ++s) {
      int32_t idot = 0;
      for (int i = 0; i < g; i += 2) {
        const int64_t e = 32 * b + s * g + i;  // element index
        const uint32_t word = static_cast<uint32_t>(xq[(e / 2) * kLanes + j]);
        const auto x0 = static_cast<int16_t>(word & 0xFFFF), x1 = static_cast<int16_t>(word >> 16);
        idot += static_cast<int32_t>(c[e]) * x0 + static_cast<int32_t>(c[e + 1]) * x1;
      }
      const float scale = dx[b * kLanes + j] * a[b * (32 / g) + s];
      acc = std::fma(static_cast<float>(idot), scale, acc);
    }
    if (mins) acc = std::fma(sx[b * kLanes + j], bm[b], acc);
  }
  return acc;
}

// Row scratch for a block of rb rows of k elements.
struct RowScratch {
  std::vector<int16_t> c;
  std::vector<float> a, bm;
  RowScratch(int64_t rb, int64_t k, int g)
      : c(static_cast<size_t>(rb * k)), a(static_cast<size_t>(rb * (k / g))), bm(static_cast<size_t>(rb * (k / 32)), 0.0f) {}
};

#if IKV_X86

// Vector unpackers for the common types (the scalar ones above give the same codes and scales; Q5_1 and Q5_K use
// those).
IKV_TARGET_AVX512_VNNI inline void store_nibbles(int16_t *c, __m128i q, int16_t off) {
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m256i lo_hi = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), mask), _mm_and_si128(q, mask));
  _mm512_storeu_si512(c, _mm512_sub_epi16(_mm512_cvtepu8_epi16(lo_hi), _mm512_set1_epi16(off)));
}

IKV_TARGET_AVX512_VNNI void unpack_q4_0_v(const uint8_t *b, int16_t *c, float *a, float *) {
  store_nibbles(c, _mm_loadu_si128(reinterpret_cast<const __m128i *>(b + offsetof(block::Q4_0, qs))), 8);
  a[0] = _cvtsh_ss(static_cast<unsigned short>(b[0] | (b[1] << 8)));
}

IKV_TARGET_AVX512_VNNI void unpack_q4_1_v(const uint8_t *b, int16_t *c, float *a, float *bm) {
  store_nibbles(c, _mm_loadu_si128(reinterpret_cast<const __m128i *>(b + offsetof(block::Q4_1, qs))), 0);
  a[0] = _cvtsh_ss(static_cast<unsigned short>(b[0] | (b[1] << 8)));
  bm[0] = _cvtsh_ss(static_cast<unsigned short>(b[2] | (b[3] << 8)));
}

IKV_TARGET_AVX512_VNNI void unpack_q5_0_v(const uint8_t *b, int16_t *c, float *a, float *) {
  uint32_t qh;
  std::memcpy(&qh, b + offsetof(block::Q5_0, qh), 4);
  store_nibbles(c, _mm_loadu_si128(reinterpret_cast<const __m128i *>(b + offsetof(block::Q5_0, qs))), 16);
  // bit j of qh adds 16 to element j
  const __m512i v = _mm512_loadu_si512(c);
  _mm512_storeu_si512(c, _mm512_mask_add_epi16(v, static_cast<__mmask32>(qh), v, _mm512_set1_epi16(16)));
  a[0] = _cvtsh_ss(static_cast<unsigned short>(b[0] | (b[1] << 8)));
}

IKV_TARGET_AVX512_VNNI void unpack_q8_0_v(const uint8_t *b, int16_t *c, float *a, float *) {
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + offsetof(block::Q8_0, qs)));
  _mm512_storeu_si512(c, _mm512_cvtepi8_epi16(q));
  a[0] = _cvtsh_ss(static_cast<unsigned short>(b[0] | (b[1] << 8)));
}

IKV_TARGET_AVX512_VNNI void unpack_q4_k_v(const uint8_t *b, int16_t *c, float *a, float *bm) {
  const float d = _cvtsh_ss(static_cast<unsigned short>(b[0] | (b[1] << 8)));
  const float dmin = _cvtsh_ss(static_cast<unsigned short>(b[2] | (b[3] << 8)));
  const __m256i mask = _mm256_set1_epi8(0x0F);
  for (int j = 0; j < 4; ++j) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + offsetof(block::Q4_K, qs) + 32 * j));
    _mm512_storeu_si512(c + 64 * j, _mm512_cvtepu8_epi16(_mm256_and_si256(q, mask)));
    _mm512_storeu_si512(c + 64 * j + 32, _mm512_cvtepu8_epi16(_mm256_and_si256(_mm256_srli_epi16(q, 4), mask)));
    float d1, m1, d2, m2;
    dq::pair_scales_k4(2 * j, b + offsetof(block::Q4_K, scales), d, dmin, &d1, &m1, &d2, &m2);
    a[2 * j] = d1;
    a[2 * j + 1] = d2;
    bm[2 * j] = -m1;
    bm[2 * j + 1] = -m2;
  }
}

IKV_TARGET_AVX512_VNNI void unpack_q6_k_v(const uint8_t *b, int16_t *c, float *a, float *) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
  const __m512i off = _mm512_set1_epi16(32);
  for (int n = 0; n < 2; ++n) {
    const uint8_t *ql = b + offsetof(block::Q6_K, ql) + 64 * n, *qh = b + offsetof(block::Q6_K, qh) + 32 * n;
    const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(ql));
    const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(ql + 32));
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(qh));
    const __m256i v[4] = {
        _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(h, m2), 4)),
        _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4))};
    for (int r = 0; r < 4; ++r) _mm512_storeu_si512(c + 128 * n + 32 * r, _mm512_sub_epi16(_mm512_cvtepu8_epi16(v[r]), off));
  }
  const auto *sc = reinterpret_cast<const int8_t *>(b + offsetof(block::Q6_K, scales));
  constexpr size_t kd = offsetof(block::Q6_K, d);
  const float d = _cvtsh_ss(static_cast<unsigned short>(b[kd] | (b[kd + 1] << 8)));
  for (int g = 0; g < 16; ++g) a[g] = d * static_cast<float>(sc[g]);
}

// pack_group with vectors for the scale and the codes (the same maximum, scale, rounding, clamp and sum, so the
// same values).
IKV_TARGET_AVX512_VNNI void pack_group_vnni(const float *x, int64_t nt, int64_t k, int32_t qmax, int32_t *xq, float *dx, float *sx) {
  const int64_t nb = k / 32;
  std::memset(xq, 0, static_cast<size_t>(k / 2 * kLanes) * sizeof(int32_t));
  std::memset(dx, 0, static_cast<size_t>(nb * kLanes) * sizeof(float));
  std::memset(sx, 0, static_cast<size_t>(nb * kLanes) * sizeof(float));
  const float fmax = static_cast<float>(qmax);
  const __m512 hi = _mm512_set1_ps(fmax), lo = _mm512_set1_ps(-fmax);
  alignas(64) int32_t words[16];
  for (int64_t j = 0; j < nt; ++j) {
    const float *xt = x + j * k;
    for (int64_t b = 0; b < nb; ++b) {
      const float *xb = xt + 32 * b;
      const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
      const bool bad = (_mm512_fpclass_ps_mask(v0, 0x99) | _mm512_fpclass_ps_mask(v1, 0x99)) != 0;  // NaN or +-Inf
      float s = 0.0f;
      for (int i = 0; i < 32; ++i) s += xb[i];
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
      float d = amax / fmax, id = d != 0.0f ? 1.0f / d : 0.0f;
      if (!(id <= std::numeric_limits<float>::max())) d = id = 0.0f;  // as pack_group
      if (bad) d = std::numeric_limits<float>::quiet_NaN();
      dx[b * kLanes + j] = d;
      sx[b * kLanes + j] = s;
      if (bad) continue;
      const __m512 vid = _mm512_set1_ps(id);
      const __m512i q0 = _mm512_cvtps_epi32(_mm512_min_ps(hi, _mm512_max_ps(lo, _mm512_mul_ps(v0, vid))));
      const __m512i q1 = _mm512_cvtps_epi32(_mm512_min_ps(hi, _mm512_max_ps(lo, _mm512_mul_ps(v1, vid))));
      // int16 codes in element order; read as 32-bit words, word p holds codes 2p (low half) and 2p + 1
      _mm256_store_si256(reinterpret_cast<__m256i *>(words), _mm512_cvtepi32_epi16(q0));
      _mm256_store_si256(reinterpret_cast<__m256i *>(words + 8), _mm512_cvtepi32_epi16(q1));
      for (int p = 0; p < 16; ++p) xq[(16 * b + p) * kLanes + j] = words[p];
    }
  }
}

IKV_TARGET_AVX512_VNNI void unpack_rows_vnni(uint32_t type, const RowsUnpack &u) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::Q4_0: u.go<unpack_q4_0_v, GgmlType::Q4_0>(); break;
    case GgmlType::Q4_1: u.go<unpack_q4_1_v, GgmlType::Q4_1>(); break;
    case GgmlType::Q5_0: u.go<unpack_q5_0_v, GgmlType::Q5_0>(); break;
    case GgmlType::Q8_0: u.go<unpack_q8_0_v, GgmlType::Q8_0>(); break;
    case GgmlType::Q4_K: u.go<unpack_q4_k_v, GgmlType::Q4_K>(); break;
    case GgmlType::Q6_K: u.go<unpack_q6_k_v, GgmlType::Q6_K>(); break;
    default: unpack_dispatch(type, u); break;
  }
}

constexpr int kTileRows = 6;

// acc += pairwise products of x and w (vpdpwssd), accumulating in place: GCC 12 treats the intrinsic's accumulator as
// a copy and moved every accumulator once per instruction (half the tile's time in register moves, measured).
IKV_TARGET_AVX512_VNNI inline void dpwssd(__m512i &acc, __m512i x, __m512i w) {
  __asm__("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(x), "v"(w));
}

// Rows r0 .. r0 + RM - 1 (scratch rows ri .. ri + RM - 1) against one packed group of nt tokens starting at t0.
template <int RM, int G, bool Mins>
IKV_TARGET_AVX512_VNNI void tile(float *out, int64_t m, int64_t t0, int64_t nt, int64_t r0, const Packed &pk, int64_t p,
                       const RowScratch &rs, int64_t ri, int64_t k) {
  const int32_t *xq = pk.q(p);
  const float *dx = pk.d(p), *sx = pk.s(p);
  const int16_t *c[RM];
  const float *a[RM], *bm[RM];
  for (int r = 0; r < RM; ++r) {
    c[r] = rs.c.data() + (ri + r) * k;
    a[r] = rs.a.data() + (ri + r) * (k / G);
    bm[r] = rs.bm.data() + (ri + r) * (k / 32);
  }
  __m512 acc[RM][2];
  for (int r = 0; r < RM; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t b = 0; b < k / 32; ++b) {
    for (int s = 0; s < 32 / G; ++s) {
      __m512i id[RM][2];
      for (int r = 0; r < RM; ++r) id[r][0] = id[r][1] = _mm512_setzero_si512();
      const int64_t e0 = 32 * b + s * G;
      for (int i = 0; i < G; i += 2) {
        const int32_t *xw = xq + ((e0 + i) / 2) * kLanes;
        const __m512i x0 = _mm512_loadu_si512(xw), x1 = _mm512_loadu_si512(xw + 16);
        for (int r = 0; r < RM; ++r) {
          int32_t pair;
          std::memcpy(&pair, c[r] + e0 + i, 4);
          const __m512i wv = _mm512_set1_epi32(pair);
          dpwssd(id[r][0], x0, wv);
          dpwssd(id[r][1], x1, wv);
        }
      }
      const __m512 d0 = _mm512_loadu_ps(dx + b * kLanes), d1 = _mm512_loadu_ps(dx + b * kLanes + 16);
      for (int r = 0; r < RM; ++r) {
        const __m512 av = _mm512_set1_ps(a[r][b * (32 / G) + s]);
        acc[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(id[r][0]), _mm512_mul_ps(d0, av), acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(id[r][1]), _mm512_mul_ps(d1, av), acc[r][1]);
      }
    }
    if (Mins) {
      const __m512 s0 = _mm512_loadu_ps(sx + b * kLanes), s1 = _mm512_loadu_ps(sx + b * kLanes + 16);
      for (int r = 0; r < RM; ++r) {
        const __m512 bv = _mm512_set1_ps(bm[r][b]);
        acc[r][0] = _mm512_fmadd_ps(s0, bv, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(s1, bv, acc[r][1]);
      }
    }
  }
  alignas(64) float lanes[kLanes];
  for (int r = 0; r < RM; ++r) {
    _mm512_store_ps(lanes, acc[r][0]);
    _mm512_store_ps(lanes + 16, acc[r][1]);
    for (int64_t j = 0; j < nt; ++j) out[(t0 + j) * m + r0 + r] = lanes[j];
  }
}

using TileFn = void (*)(float *, int64_t, int64_t, int64_t, int64_t, const Packed &, int64_t, const RowScratch &, int64_t,
                        int64_t);

template <int G, bool Mins>
TileFn tile_for(int rm) {
  static constexpr TileFn fns[kTileRows] = {tile<1, G, Mins>, tile<2, G, Mins>, tile<3, G, Mins>,
                                           tile<4, G, Mins>, tile<5, G, Mins>, tile<6, G, Mins>};
  return fns[rm - 1];
}

TileFn tile_of(const Shape &sh, int rm) {
  if (sh.g == 16) return tile_for<16, false>(rm);
  return sh.mins ? tile_for<32, true>(rm) : tile_for<32, false>(rm);
}

// Tokens per chunk: the chunk's packed groups (2 bytes per value plus two floats per 32) stay in L2 (~384 KB) while
// a block of rows passes over them.
int64_t token_chunk(int64_t k) {
  const int64_t per_token = 2 * k + 8 * (k / 32);
  return std::clamp<int64_t>((int64_t{384} * 1024 / per_token) / kLanes * kLanes, kLanes, 512);
}

// Weight rows unpacked at a time: about 64 KB of codes, a multiple of the tile's rows.
int64_t rows_block(int64_t k) {
  return std::clamp<int64_t>((int64_t{64} * 1024 / (2 * k)) / kTileRows * kTileRows, kTileRows, 8 * kTileRows);
}

IKV_TARGET_AVX512_VNNI void rows_vnni(float *out, const Packed &pk, const uint8_t *w, uint32_t type, const Shape &sh, int64_t n,
                            int64_t m0, int64_t m1, int64_t m, int64_t k) {
  const int64_t rb = rows_block(k), chunk = token_chunk(k), row_bytes = k / sh.qk * sh.bb;
  RowScratch rs(rb, k, sh.g);
  for (int64_t tc = 0; tc < n; tc += chunk) {
    const int64_t te = std::min(n, tc + chunk);
    for (int64_t r = m0; r < m1; r += rb) {
      const int64_t re = std::min(m1, r + rb);
      unpack_rows_vnni(type, RowsUnpack{w, row_bytes, r, re, k, rs.c.data(), rs.a.data(), rs.bm.data()});
      for (int64_t rr = r; rr < re; rr += kTileRows) {
        const int rm = static_cast<int>(std::min<int64_t>(kTileRows, re - rr));
        const TileFn fn = tile_of(sh, rm);
        for (int64_t t = tc; t < te; t += kLanes)
          fn(out, m, t, std::min(kLanes, te - t), rr, pk, t / kLanes, rs, rr - r, k);
      }
    }
  }
}
#endif  // IKV_X86

bool fits(uint32_t type, int64_t k, Shape *sh) { return shape_of(type, sh) && k > 0 && k % sh->qk == 0; }

}  // namespace

bool i16_type(uint32_t type) {
  Shape sh;
  return shape_of(type, &sh);
}

bool i16_prefill(uint32_t type, int64_t n, int64_t k, int32_t *qmax) {
  Shape sh;
  if (n < kI16MinTokens || !cpu_has_avx512_vnni() || !fits(type, k, &sh)) return false;
  switch (cpu_activations()) {
    case CpuActivations::int16: *qmax = 32767; return true;
    case CpuActivations::int8: *qmax = 127; return true;
    default: return false;
  }
}

bool matmul_i16_ref(float *out, const float *x, const void *w, uint32_t type, int64_t n, int64_t m, int64_t k,
                    int32_t qmax) {
  Shape sh;
  if (!fits(type, k, &sh) || (qmax != 127 && qmax != 32767)) return false;
  Packed pk;
  pack_all(pack_group, x, n, k, qmax, &pk, nullptr);
  RowScratch rs(1, k, sh.g);
  const int64_t row_bytes = k / sh.qk * sh.bb;
  const auto *wb = static_cast<const uint8_t *>(w);
  for (int64_t r = 0; r < m; ++r) {
    unpack_rows_portable(type, RowsUnpack{wb, row_bytes, r, r + 1, k, rs.c.data(), rs.a.data(), rs.bm.data()});
    for (int64_t t = 0; t < n; ++t)
      out[t * m + r] = dot_ref(pk, t / kLanes, t % kLanes, rs.c.data(), rs.a.data(), rs.bm.data(), sh.g, sh.mins);
  }
  return true;
}

bool matmul_i16(float *out, const float *x, const void *w, uint32_t type, int64_t n, int64_t m, int64_t k,
                int32_t qmax, ThreadPool *pool) {
  Shape sh;
  if (!fits(type, k, &sh) || (qmax != 127 && qmax != 32767) || !cpu_has_avx512_vnni()) return false;
#if IKV_X86
  // Tokens kSpan at a time, so that the packed activations stay bounded (2 bytes per value) whatever the chunk size.
  constexpr int64_t kSpan = 512;
  Packed pk;
  const auto *wb = static_cast<const uint8_t *>(w);
  for (int64_t s = 0; s < n; s += kSpan) {
    const int64_t ns = std::min(kSpan, n - s);
    pack_all(pack_group_vnni, x + s * k, ns, k, qmax, &pk, pool);
    auto body = [&](int64_t m0, int64_t m1) { rows_vnni(out + s * m, pk, wb, type, sh, ns, m0, m1, m, k); };
    if (pool != nullptr && pool->size() > 1 && ns * m * k >= tile::kShareMacs)
      pool->parallel_for(m, std::max<int64_t>(kTileRows, tile::rows_per_item(ns * k)), body);
    else
      body(0, m);
  }
  return true;
#else
  (void)out, (void)x, (void)w, (void)n, (void)m, (void)pool;
  return false;
#endif
}

}  // namespace cpu
}  // namespace infokv
