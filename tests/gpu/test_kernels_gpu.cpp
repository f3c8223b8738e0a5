// Parity of every CUDA kernel with its CPU twin on fresh random inputs (seed printed; INFOKV_TEST_SEED replays
// one). Tolerances by dtype: f32 paths ~1e-5 relative, f16 ~1e-2, bf16 ~5e-2. Every test skips with the probe's
// reason when no CUDA device is usable, so this binary passes (as skipped) on CI machines without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/device.hpp"
#include "cuda_test.hpp"
#include "kernels/cuda/ops_cuda.hpp"
#include "kernels/cuda/runtime.hpp"
#include "kernels/fp16.hpp"
#include "kernels/ggml_types.hpp"
#include "kernels/ops.hpp"
#include "model/rope.hpp"
#include "tests/unit/support/quant_blocks.hpp"
#include "tests/unit/support/random_inputs.hpp"

using namespace infokv;
using cuda::DeviceBuffer;

namespace {

using infokv_test::randn;
using infokv_test::test_seed;

template <typename T> DeviceBuffer up(const std::vector<T> &v) {
  DeviceBuffer b(std::max<size_t>(1, v.size() * sizeof(T)));
  b.upload(v.data(), v.size() * sizeof(T));
  return b;
}
template <typename T> std::vector<T> down(const DeviceBuffer &b, size_t n) {
  cuda::check_last_error("kernel");
  std::vector<T> v(n);
  b.download(v.data(), n * sizeof(T));
  return v;
}

double tol_for(KvDtype t) { return t == KvDtype::f32 ? 1e-5 : (t == KvDtype::f16 ? 1e-2 : 5e-2); }

// |a - b| <= atol + rtol |b| everywhere; reports the worst element.
void expect_close(const std::vector<float> &got, const std::vector<float> &want, double rtol, double atol, const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double excess = err - (atol + rtol * std::fabs(static_cast<double>(want[i])));
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  EXPECT_LE(worst_excess, 0.0) << what << ": element " << worst << " got " << got[worst] << " want " << want[worst];
}

class Gpu : public infokv_test::CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    cuda::set_device(0);
    seed_ = test_seed();
    g_.seed(seed_);
  }
  uint32_t seed_ = 0;
  std::mt19937 g_;
};

// The kernels that read or write the KV pool, once per float KV dtype the CUDA backend stores.
class GpuKv : public Gpu, public ::testing::WithParamInterface<KvDtype> {};

}  // namespace

INSTANTIATE_TEST_SUITE_P(FloatKv, GpuKv, ::testing::Values(KvDtype::f32, KvDtype::f16, KvDtype::bf16),
                         [](const ::testing::TestParamInfo<KvDtype> &i) { return std::string(kv_dtype_name(i.param)); });

TEST_F(Gpu, RmsNormMatchesCpu) {
  for (int64_t d : {64, 576, 2048, 4096}) {
    const int64_t n = 5;
    auto x = randn(static_cast<size_t>(n * d), g_, 3.0f), w = randn(static_cast<size_t>(d), g_);
    std::vector<float> want(x.size());
    cpu::rmsnorm(want.data(), x.data(), w.data(), n, d, 1e-5f);
    auto dx = up(x), dw = up(w);
    DeviceBuffer dout(x.size() * 4);
    ASSERT_EQ(cuda::rmsnorm(dout.as<float>(), dx.as<float>(), dw.as<float>(), n, d, 1e-5f, nullptr), Status::ok);
    expect_close(down<float>(dout, x.size()), want, 1e-5, 1e-6, "rmsnorm d=" + std::to_string(d));
  }
}

TEST_F(Gpu, RopeMatchesCpuAtLongPositions) {
  const int64_t n = 7, nh = 4;
  RopeScaling llama3;  // Llama 3.2's scaling, so stretched, kept and interpolated pairs are all exercised
  llama3.type = RopeScalingType::llama3;
  llama3.factor = 32;
  llama3.original_ctx = 8192;
  for (int64_t hd : {8, 64, 128})
    for (const RopeScaling &sc : {RopeScaling(), llama3}) {
      auto x = randn(static_cast<size_t>(n * nh * hd), g_);
      std::vector<int32_t> pos = {0, 1, 17, 1000, 8191, 32767, 131071};
      const std::vector<double> freq = rope_inv_freq(500000.0, static_cast<int32_t>(hd), sc, 131071);
      std::vector<float> want = x;
      cpu::rope(want.data(), pos.data(), n, nh, hd, freq.data());
      auto dx = up(x);
      auto dp = up(pos);
      auto df = up(freq);
      ASSERT_EQ(cuda::rope(dx.as<float>(), dp.as<int32_t>(), n, nh, hd, df.as<double>(), nullptr), Status::ok);
      expect_close(down<float>(dx, x.size()), want, 1e-5, 1e-5,
                   "rope hd=" + std::to_string(hd) + " scaling " + rope_scaling_name(sc.type));
    }
}

TEST_F(Gpu, SwigluAndAddMatchCpu) {
  const int64_t n = 100003;
  auto a = randn(n, g_, 4.0f), b = randn(n, g_);
  std::vector<float> want(n);
  cpu::swiglu(want.data(), a.data(), b.data(), n);
  auto da = up(a), db = up(b);
  DeviceBuffer dout(n * 4);
  ASSERT_EQ(cuda::swiglu(dout.as<float>(), da.as<float>(), db.as<float>(), n, nullptr), Status::ok);
  expect_close(down<float>(dout, n), want, 1e-5, 1e-7, "swiglu");
  std::vector<float> sum = a;
  cpu::add_inplace(sum.data(), b.data(), n);
  ASSERT_EQ(cuda::add_inplace(da.as<float>(), db.as<float>(), n, nullptr), Status::ok);
  expect_close(down<float>(da, n), sum, 0, 0, "add_inplace");
  const int64_t rows = 97, d = 1031;  // d not a multiple of any block size
  auto xb = randn(static_cast<size_t>(rows * d), g_), bias = randn(static_cast<size_t>(d), g_);
  std::vector<float> want_b = xb;
  cpu::add_bias(want_b.data(), bias.data(), rows, d);
  auto dxb = up(xb), dbias = up(bias);
  ASSERT_EQ(cuda::add_bias(dxb.as<float>(), dbias.as<float>(), rows, d, nullptr), Status::ok);
  expect_close(down<float>(dxb, xb.size()), want_b, 0, 0, "add_bias");
}

TEST_F(Gpu, ConvertIsBitExactForEveryPair) {
  const int64_t n = 4099;
  auto x = randn(n, g_, 100.0f);
  x[0] = 0.0f; x[1] = -0.0f; x[2] = 65504.0f; x[3] = 1e-7f; x[4] = 70000.0f;
  for (KvDtype s : {KvDtype::f32, KvDtype::f16, KvDtype::bf16})
    for (KvDtype d : {KvDtype::f32, KvDtype::f16, KvDtype::bf16}) {
      std::vector<uint8_t> src(static_cast<size_t>(kv_bytes(s, n))), want(static_cast<size_t>(kv_bytes(d, n)));
      cpu::convert(src.data(), s, x.data(), KvDtype::f32, n);
      cpu::convert(want.data(), d, src.data(), s, n);
      auto ds = up(src);
      DeviceBuffer dd(want.size());
      ASSERT_EQ(cuda::convert(dd.get(), d, ds.get(), s, n, nullptr), Status::ok);
      EXPECT_EQ(down<uint8_t>(dd, want.size()), want) << kv_dtype_name(s) << " -> " << kv_dtype_name(d);
    }
}

TEST_F(Gpu, GetRowsMatchesCpu) {
  const int64_t rows = 50, d = 96;
  auto emb = randn(rows * d, g_);
  std::vector<int32_t> ids = {0, 49, 7, 7, 23};
  for (auto t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
    const KvDtype kt = t == GgmlType::F32 ? KvDtype::f32 : (t == GgmlType::F16 ? KvDtype::f16 : KvDtype::bf16);
    std::vector<uint8_t> e(static_cast<size_t>(kv_bytes(kt, static_cast<int64_t>(emb.size()))));
    cpu::convert(e.data(), kt, emb.data(), KvDtype::f32, static_cast<int64_t>(emb.size()));
    std::vector<float> want(ids.size() * d);
    ASSERT_TRUE(cpu::get_rows(want.data(), e.data(), static_cast<uint32_t>(t), ids.data(), 5, d));
    auto de = up(e);
    auto di = up(ids);
    DeviceBuffer dout(want.size() * 4);
    ASSERT_EQ(cuda::get_rows(dout.as<float>(), de.get(), static_cast<uint32_t>(t), di.as<int32_t>(), 5, d, nullptr), Status::ok);
    expect_close(down<float>(dout, want.size()), want, 0, 0, "get_rows");
  }
  EXPECT_EQ(cuda::get_rows(nullptr, nullptr, static_cast<uint32_t>(GgmlType::Q4_0), nullptr, 1, 32, nullptr), Status::unsupported);
}

// The device expands quantised weights with the CPU's own block functions: bit-exact for every type.
TEST_F(Gpu, DequantizeF16IsBitExactWithCpu) {
  std::mt19937_64 rng(g_());
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q4_K,
                     GgmlType::Q5_K, GgmlType::Q6_K}) {
    const GgmlTypeTraits tr = ggml_type_traits(static_cast<uint32_t>(t));
    const size_t nb = 1000;
    const std::vector<uint8_t> b = infokv_test::random_quant_blocks(t, nb, 0.05f, rng);
    const int64_t n = static_cast<int64_t>(nb * tr.block_elems);
    std::vector<uint16_t> want(static_cast<size_t>(n));
    ASSERT_TRUE(cpu::dequantize_f16(want.data(), b.data(), static_cast<uint32_t>(t), n));
    auto db = up(b);
    DeviceBuffer dout(want.size() * 2);
    ASSERT_EQ(cuda::dequantize_f16(dout.get(), db.get(), static_cast<uint32_t>(t), n, nullptr), Status::ok) << tr.name;
    EXPECT_EQ(down<uint16_t>(dout, want.size()), want) << tr.name;
  }
  EXPECT_EQ(cuda::dequantize_f16(nullptr, nullptr, static_cast<uint32_t>(GgmlType::F16), 32, nullptr), Status::invalid_argument);
}

// A paged KV with scattered blocks, filled on the CPU and mirrored on the device.
struct PagedFixture {
  std::vector<uint8_t> pool;
  std::vector<int32_t> table;
  PagedKv host{};
  DeviceBuffer dpool, dtable;
  PagedKv dev{};

  PagedFixture(std::mt19937 &g, KvDtype dt, int32_t n_slots, int32_t nkv, int32_t hd, int32_t bs = 16) {
    const int32_t nb = (n_slots + bs - 1) / bs;
    const int64_t stride = 2LL * nkv * bs * kv_bytes(dt, hd);
    table.resize(static_cast<size_t>(std::max(1, nb)));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), g);
    pool.assign(static_cast<size_t>(stride * std::max(1, nb)), 0);
    host = PagedKv{pool.data(), stride, table.data(), n_slots, bs, nkv, hd, dt};
    auto k = randn(static_cast<size_t>(n_slots) * nkv * hd, g), v = randn(static_cast<size_t>(n_slots) * nkv * hd, g);
    cpu::kv_append(host, 0, k.data(), v.data(), n_slots);
    dpool = up(pool);
    dtable = up(table);
    dev = host;
    dev.pool = dpool.as<uint8_t>();
    dev.block_table = dtable.as<int32_t>();
  }
};

TEST_P(GpuKv, KvAppendWritesTheSameBytes) {
  const KvDtype dt = GetParam();
  PagedFixture f(g_, dt, 70, 2, 64);
  const int32_t first = 33, n = 37;
  auto k = randn(static_cast<size_t>(n) * 2 * 64, g_), v = randn(k.size(), g_);
  cpu::kv_append(f.host, first, k.data(), v.data(), n);
  auto dk = up(k), dv = up(v);
  ASSERT_EQ(cuda::kv_append(f.dev, first, dk.as<float>(), dv.as<float>(), n, nullptr), Status::ok);
  EXPECT_EQ(down<uint8_t>(f.dpool, f.pool.size()), f.pool) << kv_dtype_name(dt);
}

// Compaction moves in place (slot j <- keep[j] within one view) plus a swap: the device's two passes must land the
// same bytes as the CPU twin.
TEST_P(GpuKv, KvMoveSlotsMatchesCpu) {
  const KvDtype dt = GetParam();
  PagedFixture f(g_, dt, 100, 2, 32);
  std::vector<int32_t> keep;
  for (int32_t s = 0; s < 100; ++s)
    if (g_() % 3 != 0) keep.push_back(s);
  std::swap(keep[keep.size() - 1], keep[keep.size() - 2]);
  const int32_t bs = f.host.block_size;
  std::vector<int32_t> moves;
  for (size_t j = 0; j < keep.size(); ++j)
    moves.insert(moves.end(), {f.table[static_cast<size_t>(keep[j] / bs)], keep[j] % bs, f.table[j / static_cast<size_t>(bs)],
                               static_cast<int32_t>(j % static_cast<size_t>(bs))});
  const int64_t n = static_cast<int64_t>(keep.size());
  std::vector<uint8_t> scratch(static_cast<size_t>(n * 2 * 2 * kv_bytes(dt, 32)));
  cpu::kv_move_slots(f.host, moves.data(), n, scratch.data());
  auto dmoves = up(moves);
  DeviceBuffer dscratch(scratch.size());
  ASSERT_EQ(cuda::kv_move_slots(f.dev, dmoves.as<int32_t>(), n, dscratch.as<uint8_t>(), nullptr), Status::ok);
  EXPECT_EQ(down<uint8_t>(f.dpool, f.pool.size()), f.pool) << kv_dtype_name(dt);
}

TEST_F(Gpu, RepChangeMatchesCpu) {
  const int64_t L = 5, n = 33, d = 576;
  auto h = randn(static_cast<size_t>(L * n * d), g_);
  std::vector<float> want(static_cast<size_t>(L * n));
  cpu::rep_change_rows(want.data(), h.data(), L, n, d);
  auto dh = up(h);
  DeviceBuffer dout(want.size() * 4);
  ASSERT_EQ(cuda::rep_change_rows(dout.as<float>(), dh.as<float>(), L, n, d, nullptr), Status::ok);
  expect_close(down<float>(dout, want.size()), want, 1e-6, 1e-5, "rep_change_rows");
}

struct AttnCase {
  int32_t n_q, visible0, n_heads, n_kv, hd;
};

TEST_P(GpuKv, PagedAttentionDecodeAndPrefillMatchCpu) {
  const AttnCase cases[] = {
      {1, 1, 4, 4, 8},        // tiny head (stories260K)
      {1, 1000, 32, 8, 64},   // decode, split along the context
      {1, 5000, 8, 2, 128},   // long decode
      {37, 1, 9, 3, 64},      // causal prefill from empty
      {20, 300, 8, 8, 128},   // prefill continuing a cache
  };
  const KvDtype dt = GetParam();
  for (const AttnCase &c : cases) {
    const int32_t n_slots = c.visible0 + c.n_q - 1;
    PagedFixture f(g_, dt, n_slots, c.n_kv, c.hd);
    auto q = randn(static_cast<size_t>(c.n_q) * c.n_heads * c.hd, g_);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    std::vector<float> want(q.size()), acc(n_slots, 0.0f), cnt(n_slots, 0.0f);
    cpu::paged_attention(want.data(), q.data(), c.n_q, c.n_heads, f.host, c.visible0, scale, acc.data(), cnt.data(), nullptr);
    auto dq = up(q);
    DeviceBuffer dout(q.size() * 4);
    auto dacc = up(std::vector<float>(n_slots, 0.0f)), dcnt = up(std::vector<float>(n_slots, 0.0f));
    ASSERT_EQ(cuda::paged_attention(dout.as<float>(), dq.as<float>(), c.n_q, c.n_heads, f.dev, c.visible0, scale,
                                    dacc.as<float>(), dcnt.as<float>(), nullptr),
              Status::ok);
    const std::string what = std::string(kv_dtype_name(dt)) + " n_q=" + std::to_string(c.n_q) + " vis0=" + std::to_string(c.visible0) +
                             " hd=" + std::to_string(c.hd);
    // both sides read the same stored K/V, so only arithmetic order differs: f32-level tolerance for every dtype
    expect_close(down<float>(dout, q.size()), want, 1e-4, 1e-5, "out " + what);
    expect_close(down<float>(dacc, n_slots), acc, 1e-4, 1e-6, "acc " + what);
    expect_close(down<float>(dcnt, n_slots), cnt, 0, 0, "count " + what);
    // and without the score outputs
    ASSERT_EQ(cuda::paged_attention(dout.as<float>(), dq.as<float>(), c.n_q, c.n_heads, f.dev, c.visible0, scale, nullptr,
                                    nullptr, nullptr),
              Status::ok);
    expect_close(down<float>(dout, q.size()), want, 1e-4, 1e-5, "out (no acc) " + what);
  }
}

// A decode batch in one launch: each row reads its own part of the block table with its own visible count.
TEST_P(GpuKv, PagedAttentionRowsAndAppendRowsMatchCpu) {
  const KvDtype dt = GetParam();
  const int32_t n_heads = 8, n_kv = 2, hd = 64, bs = 16;
  PagedFixture f(g_, dt, 4000, n_kv, hd, bs);
  const std::vector<int32_t> off = {0, 10, 40, 3, 100, 7}, vis = {1, 150, 1000, 80, 33, 2500};
  const int64_t n = static_cast<int64_t>(off.size());
  const int32_t max_vis = *std::max_element(vis.begin(), vis.end());
  auto q = randn(static_cast<size_t>(n) * n_heads * hd, g_);
  const float scale = 0.125f;
  std::vector<float> want(q.size());
  for (int64_t t = 0; t < n; ++t) {
    PagedKv v = f.host;
    v.block_table = f.table.data() + off[static_cast<size_t>(t)];
    v.n_slots = vis[static_cast<size_t>(t)];
    cpu::paged_attention(want.data() + t * n_heads * hd, q.data() + t * n_heads * hd, 1, n_heads, v, v.n_slots, scale, nullptr,
                         nullptr, nullptr);
  }
  auto dq = up(q), doff = up(off), dvis = up(vis);
  DeviceBuffer dout(q.size() * 4);
  ASSERT_EQ(cuda::paged_attention_rows(dout.as<float>(), dq.as<float>(), n, n_heads, f.dev, doff.as<int32_t>(), dvis.as<int32_t>(),
                                       max_vis, scale, nullptr),
            Status::ok);
  expect_close(down<float>(dout, q.size()), want, 1e-4, 1e-5, std::string("attention rows ") + kv_dtype_name(dt));

  // appends to scattered slots
  std::vector<int32_t> addr;
  for (int64_t t = 0; t < n; ++t) addr.insert(addr.end(), {f.table[static_cast<size_t>(17 * t + 3)], static_cast<int32_t>((5 * t) % bs)});
  auto k = randn(static_cast<size_t>(n) * n_kv * hd, g_), v = randn(k.size(), g_);
  cpu::kv_append_rows(f.host, addr.data(), k.data(), v.data(), n);
  auto daddr = up(addr), dk = up(k), dv = up(v);
  ASSERT_EQ(cuda::kv_append_rows(f.dev, daddr.as<int32_t>(), dk.as<float>(), dv.as<float>(), n, nullptr), Status::ok);
  EXPECT_EQ(down<uint8_t>(f.dpool, f.pool.size()), f.pool) << "append rows " << kv_dtype_name(dt);
}

// The query-tiled prefill kernel (cuda::prefill_attention, which cuda::paged_attention routes to for
// n_q >= kPrefillTiledMinQueries without score outputs) against the CPU twin. Every head-size bound it
// instantiates, GQA groups 1 and 4, partial row tiles (17, 300 * group rows), and the two kinds of causal window:
// a prefill on top of a 203-slot cache (visible0 = n_slots - n_q + 1) and one from visible0 = 1 whose last 37
// slots no query sees (the kernel must not read them into any row).
TEST_P(GpuKv, PrefillAttentionTiledMatchesCpu) {
  struct Heads {
    int32_t n_heads, n_kv;
  };
  const KvDtype dt = GetParam();
  for (int32_t hd : {64, 128, 256})
    for (Heads hs : {Heads{2, 2}, Heads{8, 2}})
      for (int32_t n_q : {17, 64, 300})
        for (bool on_cache : {true, false}) {
          const int32_t n_slots = on_cache ? 203 + n_q : n_q + 37;
          const int32_t visible0 = on_cache ? n_slots - n_q + 1 : 1;
          PagedFixture f(g_, dt, n_slots, hs.n_kv, hd);
          auto q = randn(static_cast<size_t>(n_q) * hs.n_heads * hd, g_);
          const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
          std::vector<float> want(q.size());
          cpu::paged_attention(want.data(), q.data(), n_q, hs.n_heads, f.host, visible0, scale, nullptr, nullptr, nullptr);
          auto dq = up(q);
          DeviceBuffer dout(q.size() * 4);
          const std::string what = std::string(kv_dtype_name(dt)) + " hd=" + std::to_string(hd) + " heads=" +
                                   std::to_string(hs.n_heads) + "/" + std::to_string(hs.n_kv) + " n_q=" + std::to_string(n_q) +
                                   " n_slots=" + std::to_string(n_slots) + " vis0=" + std::to_string(visible0);
          // the tiled kernel itself (ok: it did not decline the shape) ...
          ASSERT_EQ(cuda::prefill_attention(dout.as<float>(), dq.as<float>(), n_q, hs.n_heads, f.dev, visible0, scale, nullptr),
                    Status::ok) << what;
          // same stored K/V on both sides, only the arithmetic order differs: f32-level tolerance for every dtype
          expect_close(down<float>(dout, q.size()), want, 1e-4, 1e-5, "tiled " + what);
          // ... and through the router
          dout.zero();
          ASSERT_EQ(cuda::paged_attention(dout.as<float>(), dq.as<float>(), n_q, hs.n_heads, f.dev, visible0, scale, nullptr,
                                          nullptr, nullptr),
                    Status::ok) << what;
          expect_close(down<float>(dout, q.size()), want, 1e-4, 1e-5, "routed " + what);
        }
}

// Shapes at the edges of the tiled kernel: a head smaller than its bound (8 in 32, 80 in 128), GQA group 3, a
// block size that makes tiles straddle blocks (7), the routing threshold itself, a single query, visible0 = 0
// (query 0 sees nothing: zeros, as on the CPU), and a head size it declines (6: not a multiple of 4), which
// paged_attention must still answer through the split-K kernel.
TEST_P(GpuKv, PrefillAttentionEdgeShapesMatchCpu) {
  struct Edge {
    int32_t n_q, visible0, extra_slots, n_heads, n_kv, hd, bs;
    bool tiled;  // prefill_attention accepts the shape
  };
  const Edge cases[] = {
      {static_cast<int32_t>(cuda::kPrefillTiledMinQueries), 0, 0, 9, 3, 8, 7, true},
      {33, 50, 0, 4, 2, 80, 16, true},
      {1, 40, 0, 4, 1, 64, 16, true},
      {40, 5, 11, 6, 3, 256, 7, true},
      {24, 10, 0, 4, 2, 6, 16, false},
  };
  const KvDtype dt = GetParam();
  for (const Edge &c : cases) {
    const int32_t n_slots = std::max(1, c.visible0 + c.n_q - 1 + c.extra_slots);
    PagedFixture f(g_, dt, n_slots, c.n_kv, c.hd, c.bs);
    auto q = randn(static_cast<size_t>(c.n_q) * c.n_heads * c.hd, g_);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    std::vector<float> want(q.size());
    cpu::paged_attention(want.data(), q.data(), c.n_q, c.n_heads, f.host, c.visible0, scale, nullptr, nullptr, nullptr);
    auto dq = up(q);
    DeviceBuffer dout(q.size() * 4);
    const std::string what = std::string(kv_dtype_name(dt)) + " hd=" + std::to_string(c.hd) + " n_q=" + std::to_string(c.n_q) +
                             " vis0=" + std::to_string(c.visible0) + " bs=" + std::to_string(c.bs);
    const Status st = cuda::prefill_attention(dout.as<float>(), dq.as<float>(), c.n_q, c.n_heads, f.dev, c.visible0, scale, nullptr);
    ASSERT_EQ(st, c.tiled ? Status::ok : Status::unsupported) << what;
    if (c.tiled) expect_close(down<float>(dout, q.size()), want, 1e-4, 1e-5, "tiled " + what);
    dout.zero();
    ASSERT_EQ(cuda::paged_attention(dout.as<float>(), dq.as<float>(), c.n_q, c.n_heads, f.dev, c.visible0, scale, nullptr,
                                    nullptr, nullptr),
              Status::ok) << what;
    expect_close(down<float>(dout, q.size()), want, 1e-4, 1e-5, "routed " + what);
  }
}

TEST_F(Gpu, PagedAttentionRejectsWhatItDoesNotSupport) {
  PagedFixture f(g_, KvDtype::f16, 16, 2, 32);
  DeviceBuffer d(4096);
  EXPECT_EQ(cuda::paged_attention(d.as<float>(), d.as<float>(), 1, 3, f.dev, 1, 1.0f, nullptr, nullptr, nullptr), Status::invalid_argument);
  PagedKv big = f.dev;
  big.head_dim = 512;
  EXPECT_EQ(cuda::paged_attention(d.as<float>(), d.as<float>(), 1, 2, big, 1, 1.0f, nullptr, nullptr, nullptr), Status::unsupported);
  // the tiled prefill kernel declines what it does not instantiate, launching nothing
  EXPECT_EQ(cuda::prefill_attention(d.as<float>(), d.as<float>(), 16, 2, big, 1, 1.0f, nullptr), Status::unsupported);
  PagedKv odd = f.dev;
  odd.head_dim = 6;
  EXPECT_EQ(cuda::prefill_attention(d.as<float>(), d.as<float>(), 16, 2, odd, 1, 1.0f, nullptr), Status::unsupported);
  EXPECT_EQ(cuda::prefill_attention(d.as<float>(), d.as<float>() + 1, 16, 2, f.dev, 1, 1.0f, nullptr), Status::unsupported);
  EXPECT_EQ(cuda::prefill_attention(d.as<float>(), d.as<float>(), 16, 3, f.dev, 1, 1.0f, nullptr), Status::invalid_argument);
  EXPECT_EQ(cuda::prefill_attention(d.as<float>(), nullptr, 16, 2, f.dev, 1, 1.0f, nullptr), Status::invalid_argument);
}

TEST_P(GpuKv, AttentionProbsMeanMatchesCpu) {
  const KvDtype dt = GetParam();
  const int32_t n_slots = 777, n_q = 8, nh = 8, nkv = 2, hd = 64;
  PagedFixture f(g_, dt, n_slots, nkv, hd);
  auto q = randn(static_cast<size_t>(n_q) * nh * hd, g_);
  std::vector<float> want(n_slots);
  cpu::attention_probs_mean(want.data(), q.data(), n_q, nh, f.host, n_slots - n_q + 1, 0.125f);
  auto dq = up(q);
  DeviceBuffer dp(n_slots * 4);
  ASSERT_EQ(cuda::attention_probs_mean(dp.as<float>(), dq.as<float>(), n_q, nh, f.dev, n_slots - n_q + 1, 0.125f, nullptr), Status::ok);
  expect_close(down<float>(dp, n_slots), want, 1e-4, 1e-7, std::string("probs ") + kv_dtype_name(dt));
}

TEST_F(Gpu, TopkEntropyMatchesCpu) {
  const int64_t rows = 3;
  for (int32_t n : {100, 32000, 128256}) {
    auto x = randn(static_cast<size_t>(rows * n), g_, 4.0f);
    x[10] = x[11] = x[12] = 9.0f;  // ties near the top
    auto dx = up(x);
    for (int32_t k : {0, 1, 2, 64, 256, n}) {
      std::vector<double> we(rows);
      cpu::topk_entropy_rows(we.data(), x.data(), rows, n, k);
      DeviceBuffer de(rows * 8);
      ASSERT_EQ(cuda::topk_entropy_rows(de.as<double>(), dx.as<float>(), rows, n, k, nullptr), Status::ok);
      auto ge = down<double>(de, rows);
      for (int64_t r = 0; r < rows; ++r) EXPECT_NEAR(ge[r], we[r], 1e-4 * std::max(1.0, std::fabs(we[r]))) << "n=" << n << " k=" << k;
    }
  }
}

TEST_F(Gpu, CublasMatmulMatchesCpu) {
  std::string why;
  if (!cuda::cublas_available(&why)) GTEST_SKIP() << "cuBLAS not loadable: " << why;
  const int64_t n = 5, m = 300, k = 256;
  auto x = randn(n * k, g_), w = randn(m * k, g_, 0.05f);
  for (auto t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
    const KvDtype kt = t == GgmlType::F32 ? KvDtype::f32 : (t == GgmlType::F16 ? KvDtype::f16 : KvDtype::bf16);
    std::vector<uint8_t> wb(static_cast<size_t>(kv_bytes(kt, static_cast<int64_t>(w.size()))));
    cpu::convert(wb.data(), kt, w.data(), KvDtype::f32, static_cast<int64_t>(w.size()));
    std::vector<float> want(n * m);
    ASSERT_TRUE(cpu::matmul(want.data(), x.data(), wb.data(), static_cast<uint32_t>(t), n, m, k, nullptr));
    auto dx = up(x), dw = up(wb);
    DeviceBuffer dout(want.size() * 4);
    ASSERT_EQ(cuda::matmul(dout.as<float>(), dx.as<float>(), dw.get(), static_cast<uint32_t>(t), n, m, k, nullptr), Status::ok);
    // the GPU rounds x to the weight type; f32 GEMMs may use TF32-free SGEMM: allow 1e-4 there
    const double tol = t == GgmlType::F32 ? 1e-4 : tol_for(kt);
    expect_close(down<float>(dout, want.size()), want, tol, tol, std::string("matmul ") + ggml_type_name(static_cast<uint32_t>(t)));
  }
}
