// Query-tiled causal prefill attention over the paged KV (FlashAttention-2 style on CUDA cores, f32 arithmetic),
// reading the block table directly. Templates; the launcher is in prefill_attention.cu.
//
// Rows. For KV head g the rows are the (query t, query head h) pairs with h / group == g, numbered
// row = t * group + (h - g * group), so one tile of consecutive rows holds every query head of the group for a few
// queries and they all share one K/V tile. Grid [ceil(n_q * group / kRows), n_kv_heads]; a block holds
// Cfg::kWarps warps of Cfg::kRowsPerWarp rows each.
//
// Per block: stage its queries in shared memory (f32, pre-multiplied by scale * log2(e) so that the scores are in
// the log2 domain and exp2f does the softmax), then walk the visible slots [0, vis_max) in tiles of Cfg::kSlots:
// stage the K and V tile as f32 (from f32/f16/bf16) in shared memory, sync, each warp scores its rows against the
// tile, updates its online softmax (max m, sum l, output o, all in registers) and accumulates P·V, sync.
// Causality exactly as cpu::paged_attention: query t sees slots [0, min(n_slots, visible0 + t)).
//
// Lanes. Scoring: lane -> slot j = lane % kSlots of the tile; the 32 / kSlots lanes of one slot each take a
// contiguous share of the head's float4 quads and are summed with shuffles. P·V: lane -> output dims
// lane + 32 i (i < D / 32), reading the row's probabilities from shared memory as broadcasts.
// K is stored with the float4 quad index XORed with (slot & 7), so the 8 lanes of a 128-bit load phase
// (consecutive slots, same quad) hit 8 different 4-bank groups; V and Q are read as broadcasts or unit-stride
// and need no swizzle.
//
// Requirements checked by the launcher (anything else is declined with Status::unsupported and the caller uses
// the split-K kernel): head_dim % 4 == 0 and <= 256; q, pool and block_stride 16-byte aligned (float4 / 8-byte
// quad loads).
#pragma once
#include "kernels/cuda/common.cuh"

namespace infokv {
namespace cuda {

// Tile shape per head-size bound D. All buffers are static shared memory and must stay within the 48 KiB a block
// gets without an opt-in (49,152 bytes); bytes = 4 * (rows * D [Q] + 2 * slots * D [K, V] + rows * slots [P]):
//   D =  32: rows 32, slots 32: 4 * ( 1024 +  2048 + 1024) = 16,384
//   D =  64: rows 32, slots 32: 4 * ( 2048 +  4096 + 1024) = 28,672
//   D = 128: rows 32, slots 16: 4 * ( 4096 +  4096 +  512) = 34,816  (slots 32 would need 53,248)
//   D = 256: rows 16, slots  8: 4 * ( 4096 +  4096 +  128) = 33,280  (rows 16 / slots 16 would need 50,176)
// prefill_smem_bytes<D>() computes the same and a static_assert holds each instantiation to the limit.
template <int D> struct PrefillTile;
template <> struct PrefillTile<32> { static constexpr int kWarps = 4, kRowsPerWarp = 8, kSlots = 32; };
template <> struct PrefillTile<64> { static constexpr int kWarps = 4, kRowsPerWarp = 8, kSlots = 32; };
template <> struct PrefillTile<128> { static constexpr int kWarps = 4, kRowsPerWarp = 8, kSlots = 16; };
template <> struct PrefillTile<256> { static constexpr int kWarps = 4, kRowsPerWarp = 4, kSlots = 8; };

template <int D> constexpr int prefill_rows() { return PrefillTile<D>::kWarps * PrefillTile<D>::kRowsPerWarp; }
template <int D> constexpr int prefill_smem_bytes() {
  return 4 * (prefill_rows<D>() * D + 2 * PrefillTile<D>::kSlots * D + prefill_rows<D>() * PrefillTile<D>::kSlots);
}
constexpr int kStaticSmemLimit = 48 * 1024;

struct PrefillArgs {
  float *out;        // [n_q, n_heads, head_dim]
  const float *q;    // [n_q, n_heads, head_dim], 16-byte aligned
  PagedKv kv;   // device view; pool and block_stride 16-byte aligned, head_dim % 4 == 0
  int64_t n_rows;    // n_q * group (rows per KV head, see the top of the file)
  int32_t n_heads;
  int32_t group;     // n_heads / n_kv_heads
  int32_t visible0;  // query t sees slots [0, min(n_slots, visible0 + t))
  float q_mul;       // scale * log2(e)
};

__device__ __forceinline__ int32_t prefill_visible(const PrefillArgs &a, int64_t t) {
  const int64_t v = a.visible0 + t;
  return v < a.kv.n_slots ? static_cast<int32_t>(v) : a.kv.n_slots;  // never read past the valid slots
}

// Four consecutive elements as f32. p: [4] elements, aligned to 4 elements (16 bytes for f32, 8 for f16/bf16).
template <typename T> __device__ __forceinline__ float4 load4(const T *p);
template <> __device__ __forceinline__ float4 load4<float>(const float *p) { return *reinterpret_cast<const float4 *>(p); }
template <> __device__ __forceinline__ float4 load4<__half>(const __half *p) {
  const uint2 u = *reinterpret_cast<const uint2 *>(p);
  const float2 a = __half22float2(*reinterpret_cast<const __half2 *>(&u.x));
  const float2 b = __half22float2(*reinterpret_cast<const __half2 *>(&u.y));
  return make_float4(a.x, a.y, b.x, b.y);
}
template <> __device__ __forceinline__ float4 load4<__nv_bfloat16>(const __nv_bfloat16 *p) {
  const uint2 u = *reinterpret_cast<const uint2 *>(p);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u.y));
  return make_float4(a.x, a.y, b.x, b.y);
}

template <typename T, int D>
__global__ void __launch_bounds__(PrefillTile<D>::kWarps * 32) prefill_attn_kernel(PrefillArgs a) {
  using Cfg = PrefillTile<D>;
  constexpr int NW = Cfg::kWarps, R = Cfg::kRowsPerWarp, BK = Cfg::kSlots, ROWS = NW * R, NT = NW * 32;
  constexpr int DQ = D / 4;          // float4 quads per head row
  constexpr int SPLIT = 32 / BK;     // lanes per slot when scoring
  constexpr int QPL = DQ / SPLIT;    // quads per lane when scoring
  constexpr int DL = D / 32;         // output dims per lane
  static_assert(BK == 8 || BK == 16 || BK == 32, "a slot's lanes are combined with xor-shuffles 16 .. BK");
  static_assert(DQ >= 8 && DQ % SPLIT == 0, "the K swizzle permutes quads within groups of 8");
  static_assert(prefill_smem_bytes<D>() <= kStaticSmemLimit, "static shared memory over 48 KiB");

  __shared__ float4 sq[ROWS][DQ];         // the block's query rows * q_mul; zero past head_dim and n_rows
  __shared__ float4 sk[BK][DQ];           // K tile: quad c of slot j at [j][c ^ (j & 7)]; zero past the range
  __shared__ float4 sv[BK][DQ];           // V tile: [slot][quad]; zero past the range (0 * garbage could be NaN)
  __shared__ float4 sp[NW][R][BK / 4];    // each warp's probabilities for the tile: [warp][row][slot]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int32_t g = static_cast<int32_t>(blockIdx.y);
  const int32_t hd = a.kv.head_dim, hq = hd / 4;
  // Later rows see more slots: the first blocks launched take the last (longest) row tiles.
  const int64_t row0 = (static_cast<int64_t>(gridDim.x) - 1 - blockIdx.x) * ROWS;
  const int64_t row_end = row0 + ROWS < a.n_rows ? row0 + ROWS : a.n_rows;  // > row0 by the grid size
  const int32_t blk_vis = prefill_visible(a, (row_end - 1) / a.group);      // slots the block reads: [0, blk_vis)

  for (int idx = tid; idx < ROWS * DQ; idx += NT) {
    const int r = idx / DQ, c = idx % DQ;
    const int64_t row = row0 + r;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (row < a.n_rows && c < hq) {
      const int64_t t = row / a.group;
      const int64_t h = static_cast<int64_t>(g) * a.group + row % a.group;
      v = *reinterpret_cast<const float4 *>(a.q + (t * a.n_heads + h) * hd + 4 * c);
      v.x *= a.q_mul; v.y *= a.q_mul; v.z *= a.q_mul; v.w *= a.q_mul;
    }
    sq[r][c] = v;
  }

  int32_t vis[R];
  float m[R], l[R], o[R][DL];
  int32_t warp_vis = 0;  // slots any row of this warp sees (uniform across the warp)
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = row0 + warp * R + r;
    vis[r] = row < a.n_rows ? prefill_visible(a, row / a.group) : 0;  // rows past n_rows see nothing
    warp_vis = max(warp_vis, vis[r]);
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int i = 0; i < DL; ++i) o[r][i] = 0.0f;
  }

  const int j = lane % BK, part = lane / BK;  // scoring: this lane's slot in the tile and share of the quads
  const int64_t v_off = static_cast<int64_t>(a.kv.n_kv_heads) * a.kv.block_size * hd;  // V after K, elements
  const float *svf = reinterpret_cast<const float *>(&sv[0][0]);

  for (int32_t s0 = 0; s0 < blk_vis; s0 += BK) {
    for (int idx = tid; idx < BK * DQ; idx += NT) {
      const int jj = idx / DQ, c = idx % DQ;
      const int32_t slot = s0 + jj;
      float4 kq = make_float4(0.0f, 0.0f, 0.0f, 0.0f), vq = kq;
      if (slot < blk_vis && c < hq) {
        const T *kp = kv_slot<T>(a.kv, slot, g, 0) + 4 * c;
        kq = load4<T>(kp);
        vq = load4<T>(kp + v_off);
      }
      sk[jj][c ^ (jj & 7)] = kq;
      sv[jj][c] = vq;
    }
    __syncthreads();  // tile (and, on the first pass, the queries) staged

    if (s0 < warp_vis) {  // warp-uniform: warps whose rows all end before this tile skip it
      float s[R];
#pragma unroll
      for (int r = 0; r < R; ++r) s[r] = 0.0f;
#pragma unroll 4
      for (int k = 0; k < QPL; ++k) {
        const int c = part * QPL + k;
        const float4 kq = sk[j][c ^ (j & 7)];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const float4 qv = sq[warp * R + r][c];  // broadcast within each 8-lane phase
          s[r] = fmaf(qv.x, kq.x, s[r]);
          s[r] = fmaf(qv.y, kq.y, s[r]);
          s[r] = fmaf(qv.z, kq.z, s[r]);
          s[r] = fmaf(qv.w, kq.w, s[r]);
        }
      }
      const int32_t slot = s0 + j;
      float corr[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int off = 16; off >= BK; off >>= 1) s[r] += __shfl_xor_sync(0xffffffffu, s[r], off);
        const float sc = slot < vis[r] ? s[r] : -INFINITY;  // causal mask and the tile's tail
        const float mn = fmaxf(m[r], warp_max(sc));
        float p = 0.0f;
        corr[r] = 1.0f;
        if (mn != -INFINITY) {  // -inf - -inf would be NaN: a row that has seen nothing yet stays (m, l, o) = (-inf, 0, 0)
          p = exp2f(sc - mn);            // sc = -inf -> 0
          corr[r] = exp2f(m[r] - mn);    // m = -inf (first visible tile) -> 0
        }
        l[r] = l[r] * corr[r] + warp_sum(part == 0 ? p : 0.0f);  // each slot counted by one lane
        m[r] = mn;
        if (part == 0) reinterpret_cast<float *>(&sp[warp][r][0])[j] = p;
      }
      __syncwarp();  // sp written by this warp's lanes, read by all of them below
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int i = 0; i < DL; ++i) o[r][i] *= corr[r];
#pragma unroll 2
      for (int jq = 0; jq < BK / 4; ++jq) {
        float4 p4[R];
#pragma unroll
        for (int r = 0; r < R; ++r) p4[r] = sp[warp][r][jq];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float *vrow = svf + (4 * jq + e) * D;
#pragma unroll
          for (int i = 0; i < DL; ++i) {
            const float v = vrow[lane + 32 * i];
#pragma unroll
            for (int r = 0; r < R; ++r) {
              const float pe = e == 0 ? p4[r].x : (e == 1 ? p4[r].y : (e == 2 ? p4[r].z : p4[r].w));
              o[r][i] = fmaf(pe, v, o[r][i]);
            }
          }
        }
      }
    }
    __syncthreads();  // everyone is done with sk / sv (and sp) before the next tile overwrites them
  }

#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = row0 + warp * R + r;
    if (row >= a.n_rows) continue;
    const int64_t t = row / a.group;
    const int64_t h = static_cast<int64_t>(g) * a.group + row % a.group;
    float *op = a.out + (t * a.n_heads + h) * hd;
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;  // a row that sees no slot gets zeros, as on the CPU
#pragma unroll
    for (int i = 0; i < DL; ++i) {
      const int d = lane + 32 * i;
      if (d < hd) op[d] = o[r][i] * inv;
    }
  }
}

}  // namespace cuda
}  // namespace infokv
