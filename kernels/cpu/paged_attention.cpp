// Causal attention over a paged KV cache (decode, prefill, a decode batch) and observation-window probabilities.
#include "kernels/cpu/simd.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cpu/attention_math.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/kv_rows.hpp"
#include "kernels/thread_pool.hpp"
#include "kernels/fp16.hpp"
#include "kernels/ops.hpp"

namespace infokv {
namespace cpu {

namespace {

// Scores of one query head against slots [0, n) of kv head g, converted block by block.
void head_scores(float *scores, const float *qh, const PagedKv &kv, int32_t g, int32_t n, float scale, float *kbuf) {
  const int32_t hd = kv.head_dim;
  for (int32_t s0 = 0; s0 < n; s0 += kv.block_size) {
    const int32_t cnt = std::min(kv.block_size, n - s0);
    // slots of one block and head are contiguous: [block_size][head_dim]
    load_row_rotated(kbuf, slot_ptr(kv, s0, g, 0), cnt * hd, kv.dtype);
    for (int32_t j = 0; j < cnt; ++j) {
      const float *kr = kbuf + static_cast<int64_t>(j) * hd;
      float d = 0;
      for (int32_t i = 0; i < hd; ++i) d += qh[i] * kr[i];
      scores[s0 + j] = d * scale;
    }
  }
}

using namespace attn;  // NOLINT(build/namespaces): the attention arithmetic, internal to kernels/cpu

// Blocks ahead that block_src asks for: long-context decode measured far faster with this prefetch than without, and
// about the same at two to four blocks (packaging/docs/performance.md, "Kernel choices").
constexpr int32_t kPrefetchBlocks = 3;

// Where a tile reads block s0 (n slots) of K (which = 0) or V (1) of head g from: the cache itself when `direct`
// allows the dtype (a tile of one query widens f16/bf16 inside its products on the AVX2 and AVX-512 paths, and q8_0
// on the AVX-512 one: each element is read once anyway), else kvbuf, the block widened to f32 once for every query
// of the tile (in the rotated basis for a quantised dtype). Same values either way.
enum Direct : int { kWiden = 0, kDirectFloat = 1, kDirectQ8 = 2 };
inline std::pair<const void *, KvDtype> block_src(const PagedKv &kv, int32_t s0, int32_t g, int which, int32_t n,
                                                  int direct, float *kvbuf) {
  const uint8_t *src = slot_ptr(kv, s0, g, which);
  // The blocks sit anywhere in the pool, so the hardware prefetchers cannot guess the next one: ask for the block
  // kPrefetchBlocks on (its K or V rows of head g) while this one is worked on.
  const int32_t next = s0 + kPrefetchBlocks * kv.block_size;
  if (next < kv.n_slots)
    tile::prefetch_l1(slot_ptr(kv, next, g, which), 0,
                      kv_bytes(kv.dtype, static_cast<int64_t>(kv.block_size) * kv.head_dim));
  if (direct != kWiden && (!kv_dtype_quantised(kv.dtype) || (direct == kDirectQ8 && kv.dtype == KvDtype::q8_0)))
    return {src, kv.dtype};
  load_row_rotated(kvbuf, src, n * kv.head_dim, kv.dtype);
  return {kvbuf, KvDtype::f32};
}

// The steps that differ between the tiles of each ISA, as static members of one type per ISA, so that one body
// (attend_tile_body, attend_chunk_body) holds the tile's loops for all of them: score a query's group against one K
// block (scores) and finish what a batch of queries held back (flush: only the AVX-512 tile batches queries), add
// weighted V rows (wsum_rows), and which blocks may be read in place by a tile of one query (kDirect, block_src).
// The bodies carry no target attribute and are always inlined, into functions that do (attend_tile_avx2, ...), so
// that each ISA's steps are inlined into its own copy of the loops.
struct PortableSteps {
  static constexpr int kDirect = kWiden;
  static void scores(float *ph, int64_t pstride, const float *qg, int32_t group, const void *kb, KvDtype dt, int32_t cnt,
                     int32_t hd, float scale, ScoreBatch &) {
    scores_s(ph, pstride, qg, group, kb, dt, cnt, hd, scale);
  }
  static void flush(ScoreBatch &, const void *, int32_t, float) {}
  static void wsum_rows(const WsumRow *rows, int n, const void *vb, KvDtype dt, int32_t hd) {
    wsum_rows_s(rows, n, vb, dt, hd);
  }
};

#if IKV_X86
struct Avx2Steps {
  static constexpr int kDirect = kDirectFloat;
  IKV_TARGET_AVX2 static void scores(float *ph, int64_t pstride, const float *qg, int32_t group, const void *kb,
                                     KvDtype dt, int32_t cnt, int32_t hd, float scale, ScoreBatch &) {
    scores_v(ph, pstride, qg, group, kb, dt, cnt, hd, scale);
  }
  static void flush(ScoreBatch &, const void *, int32_t, float) {}
  IKV_TARGET_AVX2 static void wsum_rows(const WsumRow *rows, int n, const void *vb, KvDtype dt, int32_t hd) {
    wsum_rows_v(rows, n, vb, dt, hd);
  }
};

struct Avx512Steps {
  static constexpr int kDirect = kDirectQ8;
  IKV_TARGET_AVX512 static void scores(float *ph, int64_t pstride, const float *qg, int32_t group, const void *kb,
                                       KvDtype dt, int32_t cnt, int32_t hd, float scale, ScoreBatch &batch) {
    scores_b512(ph, pstride, qg, group, kb, dt, cnt, hd, scale, batch);
  }
  IKV_TARGET_AVX512 static void flush(ScoreBatch &batch, const void *kb, int32_t hd, float scale) {
    scores_flush512(batch, kb, hd, scale);
  }
  IKV_TARGET_AVX512 static void wsum_rows(const WsumRow *rows, int n, const void *vb, KvDtype dt, int32_t hd) {
    wsum_rows_v512(rows, n, vb, dt, hd);
  }
};
#endif

// The scores of queries t0 .. t1-1 of one KV head g (query t seeing vis0 + t slots), each K block converted once for
// the tile (or read in place as `direct` allows): row hh of query t at p + (t - t0) * group * max_vis + hh * vis.
template <class Steps>
inline __attribute__((always_inline)) void score_tile(const float *q, int64_t t0, int64_t t1, int32_t n_heads,
                                                      const PagedKv &kv, int32_t g, int32_t group, int32_t vis0,
                                                      float scale, float *p, float *kvbuf, int direct) {
  const int32_t hd = kv.head_dim;
  const int32_t max_vis = vis0 + static_cast<int32_t>(t1 - 1);
  const int64_t qstride = static_cast<int64_t>(group) * max_vis;
  for (int32_t s0 = 0; s0 < max_vis; s0 += kv.block_size) {
    const auto blk = block_src(kv, s0, g, 0, std::min(kv.block_size, max_vis - s0), direct, kvbuf);
    ScoreBatch batch;
    for (int64_t t = std::max<int64_t>(t0, s0 - vis0 + 1); t < t1; ++t) {
      const int32_t vis = vis0 + static_cast<int32_t>(t), cnt = std::min(kv.block_size, vis - s0);
      const float *qg = q + (t * n_heads + static_cast<int64_t>(g) * group) * hd;
      Steps::scores(p + (t - t0) * qstride + s0, vis, qg, group, blk.first, blk.second, cnt, hd, scale, batch);
    }
    Steps::flush(batch, blk.first, hd, scale);
  }
}

// Context replay's scores for queries t0 .. t1-1 of one KV head g: their probabilities (score_tile, softmax), each
// slot j < n_out raised to the largest any of the group's heads gives it.
template <class Steps>
inline __attribute__((always_inline)) void probs_max_tile_body(float *probs_max, int32_t n_out, const float *q, int64_t t0,
                                                               int64_t t1, int32_t n_heads, const PagedKv &kv, int32_t g,
                                                               int32_t group, int32_t vis0, float scale, float *p,
                                                               float *kbuf) {
  score_tile<Steps>(q, t0, t1, n_heads, kv, g, group, vis0, scale, p, kbuf, kWiden);
  const int64_t qstride = static_cast<int64_t>(group) * (vis0 + static_cast<int32_t>(t1 - 1));
  for (int64_t t = t0; t < t1; ++t) {
    const int32_t vis = vis0 + static_cast<int32_t>(t), m = std::min(vis, n_out);
    for (int32_t hh = 0; hh < group; ++hh) {
      float *row = p + (t - t0) * qstride + static_cast<int64_t>(hh) * vis;
      softmax_inplace(row, vis);
      for (int32_t j = 0; j < m; ++j) probs_max[j] = std::max(probs_max[j], row[j]);
    }
  }
}

// Queries t0 .. t1-1 of one KV head g over one view, query t seeing vis0 + t slots: each K and V block is converted
// once for the whole tile instead of once per query. Each query's scores for the group's heads, their softmax and
// the weighted sum of V are computed in the same order whatever the tile, so a tile of one query (t0 = 0, t1 = 1,
// vis0 = its visible count: how a decode step is attended) gives the same bits as that query in any tile.
// out, q: [n_q][n_heads][head_dim] (rows t0 .. t1-1 used); p: [t1 - t0][group][vis0 + t1 - 1] scratch (row hh of
// query t at (t - t0) * group * max_vis + hh * vis); kvbuf: [block_size][head_dim] scratch.
template <class Steps>
inline __attribute__((always_inline)) void attend_tile_body(float *out, const float *q, int64_t t0, int64_t t1,
                                                            int32_t n_heads, const PagedKv &kv, int32_t g, int32_t group,
                                                            int32_t vis0, float scale, float *p, float *kvbuf) {
  const int32_t hd = kv.head_dim;
  const int32_t max_vis = vis0 + static_cast<int32_t>(t1 - 1);
  const int64_t qstride = static_cast<int64_t>(group) * max_vis;
  const int direct = t1 - t0 == 1 ? Steps::kDirect : kWiden;
  score_tile<Steps>(q, t0, t1, n_heads, kv, g, group, vis0, scale, p, kvbuf, direct);
  for (int64_t t = t0; t < t1; ++t) {
    const int32_t vis = vis0 + static_cast<int32_t>(t);
    for (int32_t hh = 0; hh < group; ++hh) softmax_inplace(p + (t - t0) * qstride + static_cast<int64_t>(hh) * vis, vis);
    float *og = out + (t * n_heads + static_cast<int64_t>(g) * group) * hd;
    std::fill(og, og + static_cast<int64_t>(group) * hd, 0.0f);
  }
  for (int32_t s0 = 0; s0 < max_vis; s0 += kv.block_size) {
    const auto blk = block_src(kv, s0, g, 1, std::min(kv.block_size, max_vis - s0), direct, kvbuf);
    WsumRow rows[kWsumRows];
    int nr = 0;
    for (int64_t t = std::max<int64_t>(t0, s0 - vis0 + 1); t < t1; ++t) {
      const int32_t vis = vis0 + static_cast<int32_t>(t), cnt = std::min(kv.block_size, vis - s0);
      for (int32_t hh = 0; hh < group; ++hh) {
        rows[nr++] = {out + (t * n_heads + static_cast<int64_t>(g) * group + hh) * hd,
                      p + (t - t0) * qstride + static_cast<int64_t>(hh) * vis + s0, cnt};
        if (nr == kWsumRows) Steps::wsum_rows(rows, nr, blk.first, blk.second, hd), nr = 0;
      }
    }
    if (nr > 0) Steps::wsum_rows(rows, nr, blk.first, blk.second, hd);
  }
}

#if IKV_X86
IKV_TARGET_AVX2 void attend_tile_avx2(float *out, const float *q, int64_t t0, int64_t t1, int32_t n_heads, const PagedKv &kv,
                                      int32_t g, int32_t group, int32_t vis0, float scale, float *p, float *kvbuf) {
  attend_tile_body<Avx2Steps>(out, q, t0, t1, n_heads, kv, g, group, vis0, scale, p, kvbuf);
}

IKV_TARGET_AVX512 void attend_tile_avx512(float *out, const float *q, int64_t t0, int64_t t1, int32_t n_heads,
                                          const PagedKv &kv, int32_t g, int32_t group, int32_t vis0, float scale, float *p,
                                          float *kvbuf) {
  attend_tile_body<Avx512Steps>(out, q, t0, t1, n_heads, kv, g, group, vis0, scale, p, kvbuf);
}
IKV_TARGET_AVX2 void probs_max_tile_avx2(float *pm, int32_t n_out, const float *q, int64_t t0, int64_t t1, int32_t n_heads,
                                         const PagedKv &kv, int32_t g, int32_t group, int32_t vis0, float scale, float *p,
                                         float *kbuf) {
  probs_max_tile_body<Avx2Steps>(pm, n_out, q, t0, t1, n_heads, kv, g, group, vis0, scale, p, kbuf);
}

IKV_TARGET_AVX512 void probs_max_tile_avx512(float *pm, int32_t n_out, const float *q, int64_t t0, int64_t t1,
                                             int32_t n_heads, const PagedKv &kv, int32_t g, int32_t group, int32_t vis0,
                                             float scale, float *p, float *kbuf) {
  probs_max_tile_body<Avx512Steps>(pm, n_out, q, t0, t1, n_heads, kv, g, group, vis0, scale, p, kbuf);
}
#endif

// The replay tile a CPU takes, as attend_tile chooses.
void probs_max_tile(float *pm, int32_t n_out, const float *q, int64_t t0, int64_t t1, int32_t n_heads, const PagedKv &kv,
                    int32_t g, int32_t group, int32_t vis0, float scale, float *p, float *kbuf) {
#if IKV_X86
  if (cpu_has_avx512()) return probs_max_tile_avx512(pm, n_out, q, t0, t1, n_heads, kv, g, group, vis0, scale, p, kbuf);
  if (cpu_has_avx2_fma_f16c()) return probs_max_tile_avx2(pm, n_out, q, t0, t1, n_heads, kv, g, group, vis0, scale, p, kbuf);
#endif
  probs_max_tile_body<PortableSteps>(pm, n_out, q, t0, t1, n_heads, kv, g, group, vis0, scale, p, kbuf);
}

void attend_tile_generic(float *out, const float *q, int64_t t0, int64_t t1, int32_t n_heads, const PagedKv &kv,
                         int32_t g, int32_t group, int32_t vis0, float scale, float *p, float *kvbuf) {
  attend_tile_body<PortableSteps>(out, q, t0, t1, n_heads, kv, g, group, vis0, scale, p, kvbuf);
}

// The tile a CPU takes: AVX-512, AVX2 or portable. All three give the same bits for the AVX2-capable paths (the
// AVX-512 one pairs the AVX2 chains); the portable one is its own order.
void attend_tile(float *out, const float *q, int64_t t0, int64_t t1, int32_t n_heads, const PagedKv &kv, int32_t g,
                 int32_t group, int32_t vis0, float scale, float *p, float *kvbuf) {
#if IKV_X86
  if (cpu_has_avx512()) return attend_tile_avx512(out, q, t0, t1, n_heads, kv, g, group, vis0, scale, p, kvbuf);
  if (cpu_has_avx2_fma_f16c()) return attend_tile_avx2(out, q, t0, t1, n_heads, kv, g, group, vis0, scale, p, kvbuf);
#endif
  attend_tile_generic(out, q, t0, t1, n_heads, kv, g, group, vis0, scale, p, kvbuf);
}

// Chunk [b0, b0 + chunk) of one KV head g for the queries t0 .. t1-1 (query t sees vis0 + t slots), every K/V block
// converted once for the tile. For each query that sees into the chunk and each query head hh of the group, unit
// u = unit_of(t) receives the chunk's max score m[u * group + hh], the sum of exp(s - m) l[u * group + hh] and the
// unnormalised exp(s - m)-weighted sum of V o[(u * group + hh) * head_dim ...] (merged by merge_chunks). One query
// (t0 = 0, t1 = 1, vis0 = its visible count) gives the same bits as in any tile.
// p: [t1 - t0][group][chunk] scratch, kvbuf: [block_size][head_dim] scratch; b0 is a multiple of block_size.
template <class Steps, typename UnitOf>
inline __attribute__((always_inline)) void attend_chunk_body(float *o, float *m, double *l, const float *q, int64_t t0,
                                                             int64_t t1, int32_t n_heads, const PagedKv &kv, int32_t g,
                                                             int32_t group, int32_t vis0, int32_t b0, int32_t chunk,
                                                             float scale, float *p, float *kvbuf, UnitOf unit_of) {
  const int32_t hd = kv.head_dim;
  const int32_t b_end = std::min(vis0 + static_cast<int32_t>(t1 - 1), b0 + chunk);
  const int64_t qstride = static_cast<int64_t>(group) * chunk;
  const int direct = t1 - t0 == 1 ? Steps::kDirect : kWiden;
  for (int32_t s0 = b0; s0 < b_end; s0 += kv.block_size) {
    const auto blk = block_src(kv, s0, g, 0, std::min(kv.block_size, b_end - s0), direct, kvbuf);
    ScoreBatch batch;
    for (int64_t t = std::max<int64_t>(t0, s0 - vis0 + 1); t < t1; ++t) {
      const int32_t b1 = std::min(vis0 + static_cast<int32_t>(t), b0 + chunk), n = b1 - b0;
      const int32_t cnt = std::min(kv.block_size, b1 - s0);
      const float *qg = q + (t * n_heads + static_cast<int64_t>(g) * group) * hd;
      Steps::scores(p + (t - t0) * qstride + (s0 - b0), n, qg, group, blk.first, blk.second, cnt, hd, scale, batch);
    }
    Steps::flush(batch, blk.first, hd, scale);
  }
  for (int64_t t = std::max<int64_t>(t0, b0 - vis0 + 1); t < t1; ++t) {
    const int32_t n = std::min(vis0 + static_cast<int32_t>(t), b0 + chunk) - b0;
    const int64_t u = unit_of(t);
    for (int32_t hh = 0; hh < group; ++hh)
      l[u * group + hh] = exp_shifted(p + (t - t0) * qstride + static_cast<int64_t>(hh) * n, n, &m[u * group + hh]);
    std::fill(o + u * group * hd, o + (u + 1) * group * hd, 0.0f);
  }
  for (int32_t s0 = b0; s0 < b_end; s0 += kv.block_size) {
    const auto blk = block_src(kv, s0, g, 1, std::min(kv.block_size, b_end - s0), direct, kvbuf);
    WsumRow rows[kWsumRows];
    int nr = 0;
    for (int64_t t = std::max<int64_t>(t0, s0 - vis0 + 1); t < t1; ++t) {
      const int32_t b1 = std::min(vis0 + static_cast<int32_t>(t), b0 + chunk), n = b1 - b0;
      const int32_t cnt = std::min(kv.block_size, b1 - s0);
      const int64_t u = unit_of(t);
      for (int32_t hh = 0; hh < group; ++hh) {
        rows[nr++] = {o + (u * group + hh) * hd, p + (t - t0) * qstride + static_cast<int64_t>(hh) * n + (s0 - b0), cnt};
        if (nr == kWsumRows) Steps::wsum_rows(rows, nr, blk.first, blk.second, hd), nr = 0;
      }
    }
    if (nr > 0) Steps::wsum_rows(rows, nr, blk.first, blk.second, hd);
  }
}

#if IKV_X86
template <typename UnitOf>
IKV_TARGET_AVX2 void attend_chunk_tile_avx2(float *o, float *m, double *l, const float *q, int64_t t0, int64_t t1,
                                            int32_t n_heads, const PagedKv &kv, int32_t g, int32_t group, int32_t vis0,
                                            int32_t b0, int32_t chunk, float scale, float *p, float *kvbuf, UnitOf unit_of) {
  attend_chunk_body<Avx2Steps>(o, m, l, q, t0, t1, n_heads, kv, g, group, vis0, b0, chunk, scale, p, kvbuf, unit_of);
}

template <typename UnitOf>
IKV_TARGET_AVX512 void attend_chunk_tile_avx512(float *o, float *m, double *l, const float *q, int64_t t0, int64_t t1,
                                                int32_t n_heads, const PagedKv &kv, int32_t g, int32_t group, int32_t vis0,
                                                int32_t b0, int32_t chunk, float scale, float *p, float *kvbuf,
                                                UnitOf unit_of) {
  attend_chunk_body<Avx512Steps>(o, m, l, q, t0, t1, n_heads, kv, g, group, vis0, b0, chunk, scale, p, kvbuf, unit_of);
}
#endif

template <typename UnitOf>
void attend_chunk_tile_generic(float *o, float *m, double *l, const float *q, int64_t t0, int64_t t1, int32_t n_heads,
                               const PagedKv &kv, int32_t g, int32_t group, int32_t vis0, int32_t b0, int32_t chunk,
                               float scale, float *p, float *kvbuf, UnitOf unit_of) {
  attend_chunk_body<PortableSteps>(o, m, l, q, t0, t1, n_heads, kv, g, group, vis0, b0, chunk, scale, p, kvbuf, unit_of);
}

template <typename UnitOf>
void attend_chunk_tile(float *o, float *m, double *l, const float *q, int64_t t0, int64_t t1, int32_t n_heads,
                       const PagedKv &kv, int32_t g, int32_t group, int32_t vis0, int32_t b0, int32_t chunk, float scale,
                       float *p, float *kvbuf, UnitOf unit_of) {
#if IKV_X86
  if (cpu_has_avx512())
    return attend_chunk_tile_avx512(o, m, l, q, t0, t1, n_heads, kv, g, group, vis0, b0, chunk, scale, p, kvbuf,
                                    unit_of);
  if (cpu_has_avx2_fma_f16c())
    return attend_chunk_tile_avx2(o, m, l, q, t0, t1, n_heads, kv, g, group, vis0, b0, chunk, scale, p, kvbuf, unit_of);
#endif
  attend_chunk_tile_generic(o, m, l, q, t0, t1, n_heads, kv, g, group, vis0, b0, chunk, scale, p, kvbuf, unit_of);
}

// og[group][head_dim] = the attention output from n_chunks partial results (o, m, l as attend_chunk_* writes them,
// chunk c at o + c * group * hd, m/l + c * group), rescaled to the common max and normalised. Chunks in order.
void merge_chunks(float *og, const float *o, const float *m, const double *l, int32_t n_chunks, int32_t group, int32_t hd) {
  for (int32_t hh = 0; hh < group; ++hh) {
    float mx = -INFINITY;
    for (int32_t c = 0; c < n_chunks; ++c) mx = std::max(mx, m[c * group + hh]);
    double sum = 0;
    float *out = og + static_cast<int64_t>(hh) * hd;
    std::fill(out, out + hd, 0.0f);
    for (int32_t c = 0; c < n_chunks; ++c) {
      const double w = std::exp(static_cast<double>(m[c * group + hh]) - mx);
      sum += w * l[c * group + hh];
      const float wf = static_cast<float>(w);
      const float *oc = o + (static_cast<int64_t>(c) * group + hh) * hd;
      for (int32_t i = 0; i < hd; ++i) out[i] += wf * oc[i];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int32_t i = 0; i < hd; ++i) out[i] *= inv;
  }
}

}  // namespace

namespace {

// Long contexts without H2O sums are cut into chunks of kSplitChunk slots (whole blocks), so a decode step of one
// sequence, which has only one item per KV head (3 for SmolLM2), still spreads over every thread, and each chunk's
// scores stay in cache (flash-decoding). The chunking depends only on each query's visible count, never on the
// thread count or on what else is in the batch, so results are the same for any number of threads and batch.
constexpr int32_t kSplitMinSlots = 1024;
constexpr int32_t kSplitChunk = 512;
// Queries of one prefill attended together, so each K/V block they share is converted once for all of them.
constexpr int64_t kQueryTile = 8;
// A prefill's tiles cost more the later their queries (causal): handed out in 16 chunks per thread, the last ones
// are small enough that the threads finish together.
constexpr int kPrefillChunksPerThread = 16;

// prefill_vis0 > 0: the queries are a prefill of one view, query t seeing prefill_vis0 + t slots; work items are
// then (kQueryTile queries, KV head, chunk) and each K/V block is converted once per tile (the same bits).
template <typename ViewFor>
void attend_split(float *out, const float *q, int64_t n_q, int32_t n_heads, const PagedKv &kv, float scale, ThreadPool *pool,
                  ViewFor view_for, int32_t prefill_vis0 = 0) {
  const int32_t hd = kv.head_dim, G = kv.n_kv_heads, group = n_heads / G;
  const int32_t chunk = std::max(kv.block_size, (kSplitChunk + kv.block_size - 1) / kv.block_size * kv.block_size);
  // Units: (query t, KV head g, chunk c), listed query by query; first_unit[t] is query t's first.
  std::vector<int64_t> first_unit(static_cast<size_t>(n_q) + 1, 0);
  std::vector<int32_t> n_chunks(static_cast<size_t>(n_q));
  for (int64_t t = 0; t < n_q; ++t) {
    const int32_t vis = view_for(t).second;
    n_chunks[static_cast<size_t>(t)] = std::max(1, (vis + chunk - 1) / chunk);
    first_unit[static_cast<size_t>(t) + 1] = first_unit[static_cast<size_t>(t)] + static_cast<int64_t>(G) * n_chunks[static_cast<size_t>(t)];
  }
  const int64_t units = first_unit.back();
  std::vector<float> o(static_cast<size_t>(units) * group * hd), m(static_cast<size_t>(units) * group);
  std::vector<double> l(static_cast<size_t>(units) * group);
  auto body = [&](int64_t u0, int64_t u1) {
    std::vector<float> p(static_cast<size_t>(group) * chunk), kvbuf(static_cast<size_t>(kv.block_size) * hd);
    int64_t t = std::upper_bound(first_unit.begin(), first_unit.end(), u0) - first_unit.begin() - 1;
    for (int64_t u = u0; u < u1; ++u) {
      while (u >= first_unit[static_cast<size_t>(t) + 1]) ++t;
      const int32_t nc = n_chunks[static_cast<size_t>(t)];
      const int64_t k = u - first_unit[static_cast<size_t>(t)];
      const int32_t g = static_cast<int32_t>(k / nc), c = static_cast<int32_t>(k % nc);
      const std::pair<PagedKv, int32_t> vv = view_for(t);
      const int32_t b0 = c * chunk, b1 = std::min(vv.second, b0 + chunk);
      const float *qt = q + t * n_heads * hd;  // query t alone: a tile of one
      float *ou = o.data() + static_cast<size_t>(u) * group * hd;
      float *mu = m.data() + static_cast<size_t>(u) * group;
      double *lu = l.data() + static_cast<size_t>(u) * group;
      auto unit0 = [](int64_t) { return int64_t{0}; };
      if (b1 <= b0) {  // nothing visible in this chunk: it adds nothing
        std::fill(ou, ou + static_cast<int64_t>(group) * hd, 0.0f);
        std::fill(mu, mu + group, -INFINITY);
        std::fill(lu, lu + group, 0.0);
      } else {
        attend_chunk_tile(ou, mu, lu, qt, 0, 1, n_heads, vv.first, g, group, vv.second, b0, chunk, scale, p.data(),
                          kvbuf.data(), unit0);
      }
    }
  };
  // Tiles: units (tile, g, c) for the chunks of the tile's last query; query t's result goes to its own unit.
  const int64_t n_tiles = (n_q + kQueryTile - 1) / kQueryTile;
  std::vector<int64_t> first_tile_unit(static_cast<size_t>(n_tiles) + 1, 0);
  for (int64_t T = 0; T < n_tiles && prefill_vis0 > 0; ++T) {
    const int64_t last = std::min(n_q, (T + 1) * kQueryTile) - 1;
    first_tile_unit[static_cast<size_t>(T) + 1] =
        first_tile_unit[static_cast<size_t>(T)] + static_cast<int64_t>(G) * n_chunks[static_cast<size_t>(last)];
  }
  auto tile_body = [&](int64_t u0, int64_t u1) {
    std::vector<float> p(static_cast<size_t>(kQueryTile * group) * chunk), kvbuf(static_cast<size_t>(kv.block_size) * hd);
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t T = std::upper_bound(first_tile_unit.begin(), first_tile_unit.end(), u) - first_tile_unit.begin() - 1;
      const int64_t t0 = T * kQueryTile, t1 = std::min(n_q, t0 + kQueryTile);
      const int32_t nc = n_chunks[static_cast<size_t>(t1 - 1)];
      const int64_t k = u - first_tile_unit[static_cast<size_t>(T)];
      const int32_t g = static_cast<int32_t>(k / nc), c = static_cast<int32_t>(k % nc);
      auto unit_of = [&](int64_t t) {
        return first_unit[static_cast<size_t>(t)] + static_cast<int64_t>(g) * n_chunks[static_cast<size_t>(t)] + c;
      };
      attend_chunk_tile(o.data(), m.data(), l.data(), q, t0, t1, n_heads, kv, g, group, prefill_vis0, c * chunk, chunk,
                        scale, p.data(), kvbuf.data(), unit_of);
    }
  };
  if (prefill_vis0 > 0) {
    if (pool == nullptr) tile_body(0, first_tile_unit.back());
    else pool->parallel_for(first_tile_unit.back(), 1, tile_body, kPrefillChunksPerThread);
  } else if (pool == nullptr) {
    body(0, units);
  } else {
    pool->parallel_for(units, 1, body);
  }
  for (int64_t t = 0; t < n_q; ++t)
    for (int32_t g = 0; g < G; ++g) {
      const int32_t nc = n_chunks[static_cast<size_t>(t)];
      const size_t u = static_cast<size_t>(first_unit[static_cast<size_t>(t)] + static_cast<int64_t>(g) * nc);
      merge_chunks(out + (t * n_heads + static_cast<int64_t>(g) * group) * hd, o.data() + u * group * hd, m.data() + u * group,
                   l.data() + u * group, nc, group, hd);
    }
}

// The attention of n_q queries in one pass each, query t over the view and visible count view_for(t) returns. A
// work item is one query and one KV head: each K/V block is converted to f32 once and used by every query head of
// the group. acc (H2O scores) sums over all heads of a query, so with acc the items run in order. max_vis >= every
// visible count.
template <typename ViewFor>
void attend_items(float *out, const float *q, int64_t n_q, int32_t n_heads, const PagedKv &kv, int32_t max_vis, float scale,
                  float *acc, float *acc_count, ThreadPool *pool, ViewFor view_for) {
  const int32_t hd = kv.head_dim;
  const int32_t group = n_heads / kv.n_kv_heads;
  const size_t width = static_cast<size_t>(std::max(1, max_vis));
  // One work item: query t, KV head g. acc_row / count_row receive its H2O sums (null: none).
  auto run = [&](int64_t it, float *acc_row, float *count_row, std::vector<float> &p, std::vector<float> &kvbuf) {
    const int64_t t = it / kv.n_kv_heads;
    const int32_t g = static_cast<int32_t>(it % kv.n_kv_heads);
    const std::pair<PagedKv, int32_t> vv = view_for(t);
    const int32_t vis = vv.second;
    const int64_t row = t * n_heads * hd;  // query t alone: a tile of one, p laid out [group][vis]
    attend_tile(out + row, q + row, 0, 1, n_heads, vv.first, g, group, vis, scale, p.data(), kvbuf.data());
    if (acc_row) {
      const float inv_h = 1.0f / static_cast<float>(n_heads);
      for (int32_t hh = 0; hh < group; ++hh) {
        const float *ph = p.data() + static_cast<size_t>(hh) * static_cast<size_t>(vis);
        for (int32_t j = 0; j < vis; ++j) acc_row[j] += ph[j] * inv_h;
      }
    }
    if (count_row && g == 0)
      for (int32_t j = 0; j < vis; ++j) count_row[j] += 1.0f;
  };
  auto body = [&](int64_t i0, int64_t i1) {
    std::vector<float> p(static_cast<size_t>(group) * width), kvbuf(static_cast<size_t>(kv.block_size) * hd);
    for (int64_t it = i0; it < i1; ++it) run(it, acc, acc_count, p, kvbuf);
  };
  const int64_t items = n_q * kv.n_kv_heads;
  const int64_t work = n_q * static_cast<int64_t>(max_vis) * hd * n_heads;
  if (pool == nullptr || work < (int64_t{1} << 16)) {
    body(0, items);
  } else if (acc == nullptr) {
    pool->parallel_for(items, 1, body);
  } else {
    // H2O sums in parallel and still deterministic: one task per KV head, its queries in order into a row of its
    // own; the rows are then added in head order (the counts come from head 0 alone).
    const int32_t G = kv.n_kv_heads;
    std::vector<float> rows(static_cast<size_t>(G) * width, 0.0f);
    pool->parallel_for(G, 1, [&](int64_t g0, int64_t g1) {
      std::vector<float> p(static_cast<size_t>(group) * width), kvbuf(static_cast<size_t>(kv.block_size) * hd);
      for (int64_t g = g0; g < g1; ++g)
        for (int64_t t = 0; t < n_q; ++t) run(t * G + g, rows.data() + static_cast<size_t>(g) * width, acc_count, p, kvbuf);
    });
    for (int32_t g = 0; g < G; ++g) {
      const float *row = rows.data() + static_cast<size_t>(g) * width;
      for (int32_t j = 0; j < max_vis; ++j) acc[j] += row[j];
    }
  }
}

// The attention of n_q queries, query t over the view and visible count view_for(t) returns: each query in one pass
// (attend_items) or, from kSplitMinSlots visible slots on and without H2O sums, in chunks (attend_split). Which one is
// decided by the query's own visible count, never by the longest in the call, so a query gets the same bits whatever
// it is batched with (a decode step of sequences of different lengths) and wherever a prompt's chunks were cut.
template <typename ViewFor>
void attend_queries(float *out, const float *q, int64_t n_q, int32_t n_heads, const PagedKv &kv, int32_t max_vis, float scale,
                    float *acc, float *acc_count, ThreadPool *pool, ViewFor view_for) {
  if (acc != nullptr || max_vis < kSplitMinSlots) {
    attend_items(out, q, n_q, n_heads, kv, max_vis, scale, acc, acc_count, pool, view_for);
    return;
  }
  std::vector<int64_t> shorter, longer;  // query indices by path
  int32_t max_short = 0;
  for (int64_t t = 0; t < n_q; ++t) {
    const int32_t vis = view_for(t).second;
    if (vis >= kSplitMinSlots) {
      longer.push_back(t);
    } else {
      shorter.push_back(t);
      max_short = std::max(max_short, vis);
    }
  }
  if (shorter.empty()) {
    attend_split(out, q, n_q, n_heads, kv, scale, pool, view_for);
    return;
  }
  // Both paths: each on its queries' rows gathered, the outputs scattered back.
  const size_t row = static_cast<size_t>(n_heads) * static_cast<size_t>(kv.head_dim);
  auto on_subset = [&](const std::vector<int64_t> &ts, auto &&attend) {
    std::vector<float> qs(ts.size() * row), os(ts.size() * row);
    for (size_t i = 0; i < ts.size(); ++i) std::copy_n(q + static_cast<size_t>(ts[i]) * row, row, qs.data() + i * row);
    attend(os.data(), qs.data(), static_cast<int64_t>(ts.size()), [&](int64_t i) { return view_for(ts[static_cast<size_t>(i)]); });
    for (size_t i = 0; i < ts.size(); ++i) std::copy_n(os.data() + i * row, row, out + static_cast<size_t>(ts[i]) * row);
  };
  on_subset(shorter, [&](float *o, const float *qs, int64_t n, auto vf) {
    attend_items(o, qs, n, n_heads, kv, max_short, scale, nullptr, nullptr, pool, vf);
  });
  on_subset(longer, [&](float *o, const float *qs, int64_t n, auto vf) { attend_split(o, qs, n, n_heads, kv, scale, pool, vf); });
}

// Prefill of n_q queries of one sequence (query t sees visible0 + t slots) in work items of kQueryTile queries and
// one KV head (attend_tile_*): K/V blocks are converted once per tile, not once per query.

void attend_tiles(float *out, const float *q, int64_t n_q, int32_t n_heads, const PagedKv &kv, int32_t visible0,
                  float scale, ThreadPool *pool) {
  const int32_t G = kv.n_kv_heads, group = n_heads / G, hd = kv.head_dim;
  const int32_t max_vis = visible0 + static_cast<int32_t>(n_q) - 1;
  const int64_t n_tiles = (n_q + kQueryTile - 1) / kQueryTile;
  auto body = [&](int64_t i0, int64_t i1) {
    std::vector<float> p(static_cast<size_t>(kQueryTile * group) * static_cast<size_t>(max_vis));
    std::vector<float> kvbuf(static_cast<size_t>(kv.block_size) * hd);
    for (int64_t it = i0; it < i1; ++it) {
      const int64_t t0 = it / G * kQueryTile, t1 = std::min(n_q, t0 + kQueryTile);
      const int32_t g = static_cast<int32_t>(it % G);
      attend_tile(out, q, t0, t1, n_heads, kv, g, group, visible0, scale, p.data(), kvbuf.data());
    }
  };
  const int64_t work = n_q * static_cast<int64_t>(max_vis) * hd * n_heads;
  if (pool == nullptr || work < (int64_t{1} << 16)) body(0, n_tiles * G);
  else pool->parallel_for(n_tiles * G, 1, body, kPrefillChunksPerThread);
}

// A quantised cache holds rotated blocks (kernels/kv_quant.hpp): its attention runs in that basis, on queries rotated
// once here (`rq` holds them; q itself for a float cache).
const float *queries_for(const PagedKv &kv, const float *q, int64_t n, std::vector<float> &rq) {
  if (!kv_dtype_quantised(kv.dtype)) return q;
  rq.assign(q, q + n);
  rotate_rows(rq.data(), n);
  return rq.data();
}

}  // namespace

void paged_attention(float *out, const float *q0, int64_t n_q, int32_t n_heads, const PagedKv &kv, int32_t visible0,
                     float scale, float *acc, float *acc_count, ThreadPool *pool) {
  std::vector<float> rq;
  const int64_t n_out = n_q * n_heads * kv.head_dim;
  const float *q = queries_for(kv, q0, n_out, rq);
  struct Unrotate {  // the output back from the rotated basis, on every return path
    float *o;
    int64_t n;
    bool on;
    ~Unrotate() {
      if (on) unrotate_rows(o, n);
    }
  } unrotate{out, n_out, q != q0};
  if (acc == nullptr && n_q > 1 && visible0 >= 1) {
    // Queries that see fewer than kSplitMinSlots slots in one pass each (in tiles), the rest chunk by chunk: by each
    // query's own visible count, so a query's bits do not depend on where its prompt's chunks were cut.
    const int64_t n_short = std::min<int64_t>(n_q, std::max<int64_t>(0, int64_t{kSplitMinSlots} - visible0));
    if (n_short > 0) attend_tiles(out, q, n_short, n_heads, kv, visible0, scale, pool);
    if (n_short < n_q) {
      const int64_t row = static_cast<int64_t>(n_heads) * kv.head_dim;
      const int32_t vis_long = visible0 + static_cast<int32_t>(n_short);
      attend_split(out + n_short * row, q + n_short * row, n_q - n_short, n_heads, kv, scale, pool,
                   [&](int64_t t) { return std::make_pair(kv, vis_long + static_cast<int32_t>(t)); }, vis_long);
    }
    return;
  }
  attend_queries(out, q, n_q, n_heads, kv, visible0 + static_cast<int32_t>(n_q) - 1, scale, acc, acc_count, pool,
                 [&](int64_t t) { return std::make_pair(kv, visible0 + static_cast<int32_t>(t)); });
}

void paged_attention_rows(float *out, const float *q0, int64_t n_q, int32_t n_heads, const PagedKv &kv, const int32_t *table_off,
                          const int32_t *vis, int32_t max_vis, float scale, ThreadPool *pool) {
  std::vector<float> rq;
  const int64_t n_out = n_q * n_heads * kv.head_dim;
  const float *q = queries_for(kv, q0, n_out, rq);
  attend_queries(out, q, n_q, n_heads, kv, max_vis, scale, nullptr, nullptr, pool, [&](int64_t t) {
    PagedKv v = kv;
    v.block_table = kv.block_table + table_off[t];
    v.n_slots = vis[t];
    return std::make_pair(v, vis[t]);
  });
  if (q != q0) unrotate_rows(out, n_out);
}

void attention_probs_mean(float *probs, const float *q0, int64_t n_q, int32_t n_heads, const PagedKv &kv,
                          int32_t visible0, float scale) {
  std::vector<float> rq;
  const float *q = queries_for(kv, q0, n_q * n_heads * kv.head_dim, rq);
  const int32_t group = n_heads / kv.n_kv_heads;
  std::fill(probs, probs + kv.n_slots, 0.0f);
  std::vector<float> p(static_cast<size_t>(std::max(1, kv.n_slots)));
  std::vector<float> kbuf(static_cast<size_t>(kv.block_size) * kv.head_dim);
  const float w = 1.0f / static_cast<float>(n_q * n_heads);
  for (int64_t t = 0; t < n_q; ++t) {
    const int32_t vis = std::min(kv.n_slots, visible0 + static_cast<int32_t>(t));
    for (int32_t h = 0; h < n_heads; ++h) {
      head_scores(p.data(), q + (t * n_heads + h) * kv.head_dim, kv, h / group, vis, scale, kbuf.data());
      softmax_inplace(p.data(), vis);
      for (int32_t j = 0; j < vis; ++j) probs[j] += p[static_cast<size_t>(j)] * w;
    }
  }
}

void attention_probs_max(float *probs_max, int32_t n_out, const float *q0, int64_t n_q, int32_t n_heads, const PagedKv &kv,
                         int32_t visible0, float scale) {
  std::vector<float> rq;
  const float *q = queries_for(kv, q0, n_q * n_heads * kv.head_dim, rq);
  const int32_t group = n_heads / kv.n_kv_heads;
  std::vector<float> kbuf(static_cast<size_t>(kv.block_size) * kv.head_dim);
  if (visible0 >= 1 && n_q >= 1 && visible0 + n_q - 1 <= kv.n_slots) {
    // In tiles of kQueryTile queries per KV head: each K block converted once per tile, the group's heads scored
    // together by the attention tiles' own steps.
    const int32_t max_vis = visible0 + static_cast<int32_t>(n_q) - 1;
    std::vector<float> p(static_cast<size_t>(kQueryTile * group) * static_cast<size_t>(max_vis));
    for (int64_t t0 = 0; t0 < n_q; t0 += kQueryTile)
      for (int32_t g = 0; g < kv.n_kv_heads; ++g)
        probs_max_tile(probs_max, n_out, q, t0, std::min(n_q, t0 + kQueryTile), n_heads, kv, g, group, visible0, scale,
                       p.data(), kbuf.data());
    return;
  }
  std::vector<float> p(static_cast<size_t>(std::max(1, kv.n_slots)));
  for (int64_t t = 0; t < n_q; ++t) {
    const int32_t vis = std::min(kv.n_slots, visible0 + static_cast<int32_t>(t));
    const int32_t m = std::min(vis, n_out);
    for (int32_t h = 0; h < n_heads; ++h) {
      head_scores(p.data(), q + (t * n_heads + h) * kv.head_dim, kv, h / group, vis, scale, kbuf.data());
      softmax_inplace(p.data(), vis);
      for (int32_t j = 0; j < m; ++j) probs_max[j] = std::max(probs_max[j], p[static_cast<size_t>(j)]);
    }
  }
}

}  // namespace cpu
}  // namespace infokv
