// Quantised weights: block dequantisation bit-exact against the gguf package (tests/reference/make_refs.py), the
// quantised matmul against a float64 dot of the dequantised rows (1 and 2 threads, several token counts), embedding
// rows, and a whole tiny Llama whose every matrix is quantised against the same model stored as F32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <unistd.h>

#include "support/gguf_builder.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "kernels/thread_pool.hpp"
#include "kernels/fp16.hpp"
#include "kernels/ggml_types.hpp"
#include "kernels/ops.hpp"
#include "model/model.hpp"
#include "support/quant_blocks.hpp"
#include "session/session.hpp"
#include "support/paths.hpp"
#include "util/error.hpp"
#include "support/util.hpp"

using infokv::GgmlType;
using infokv_test::GgufBuilder;

namespace {

const std::vector<GgmlType> kQuantTypes = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                                           GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

uint32_t u(GgmlType t) { return static_cast<uint32_t>(t); }

}  // namespace

TEST(Dequant, BitExactWithGgufPackageForEverySupportedType) {
  std::ifstream in(infokv_test::test_data_dir() + "/dequant_refs.bin", std::ios::binary);
  ASSERT_TRUE(in.good()) << "tests/data/dequant_refs.bin missing";
  std::set<uint32_t> seen;
  while (true) {
    uint32_t hdr[3];
    if (!in.read(reinterpret_cast<char *>(hdr), sizeof(hdr))) break;
    std::vector<uint8_t> blocks(hdr[2]);
    std::vector<float> want(hdr[1]), got(hdr[1], -1.0f);
    in.read(reinterpret_cast<char *>(blocks.data()), hdr[2]);
    in.read(reinterpret_cast<char *>(want.data()), hdr[1] * 4);
    ASSERT_TRUE(in.good());
    const char *name = infokv::ggml_type_name(hdr[0]);
    ASSERT_TRUE(infokv::cpu::dequantize(got.data(), blocks.data(), hdr[0], hdr[1])) << name;
    size_t bad = 0;
    for (size_t k = 0; k < want.size(); ++k)
      if (infokv::float_to_bits(got[k]) != infokv::float_to_bits(want[k]) && ++bad <= 3)
        ADD_FAILURE() << name << " element " << k << ": got " << got[k] << ", want " << want[k];
    EXPECT_EQ(bad, 0u) << name;
    seen.insert(hdr[0]);
  }
  for (GgmlType t : kQuantTypes) EXPECT_TRUE(seen.count(u(t))) << infokv::ggml_type_name(u(t)) << " has no reference";
}

// The f16 expansion (what the CUDA backend keeps resident) is the f32 dequantisation rounded to nearest even.
TEST(Dequant, F16ExpansionIsTheRoundedF32Dequantisation) {
  std::mt19937_64 rng(7);
  for (GgmlType t : kQuantTypes) {
    const infokv::GgmlTypeTraits tr = infokv::ggml_type_traits(u(t));
    const std::vector<uint8_t> b = infokv_test::random_quant_blocks(t, 9, 0.05f, rng);
    const int64_t n = 9 * static_cast<int64_t>(tr.block_elems);
    std::vector<float> f(static_cast<size_t>(n));
    std::vector<uint16_t> h(f.size());
    ASSERT_TRUE(infokv::cpu::dequantize(f.data(), b.data(), u(t), n));
    ASSERT_TRUE(infokv::cpu::dequantize_f16(h.data(), b.data(), u(t), n)) << tr.name;
    for (size_t i = 0; i < f.size(); ++i) ASSERT_EQ(h[i], infokv::float_to_fp16(f[i])) << tr.name << " element " << i;
  }
  std::vector<uint16_t> h(64);
  const std::vector<uint8_t> b(256, 0);
  EXPECT_FALSE(infokv::cpu::dequantize_f16(h.data(), b.data(), u(GgmlType::F16), 32));
  EXPECT_FALSE(infokv::cpu::dequantize_f16(h.data(), b.data(), u(GgmlType::Q4_0), 31));
}

TEST(Dequant, RejectsPartialBlocksAndUnsupportedTypes) {
  std::vector<float> out(512);
  std::vector<uint8_t> in(1024);
  EXPECT_FALSE(infokv::cpu::dequantize(out.data(), in.data(), u(GgmlType::Q4_0), 31));
  EXPECT_FALSE(infokv::cpu::dequantize(out.data(), in.data(), u(GgmlType::Q4_K), 128));
  EXPECT_FALSE(infokv::cpu::dequantize(out.data(), in.data(), u(GgmlType::Q2_K), 256));
  EXPECT_FALSE(infokv::cpu::dequantize(out.data(), in.data(), u(GgmlType::IQ4_NL), 32));
  EXPECT_FALSE(infokv::cpu::weight_type_supported(u(GgmlType::Q3_K)));
  EXPECT_TRUE(infokv::cpu::weight_type_supported(u(GgmlType::Q6_K)));
}

// The exact f32 path (decode's integer activations, the default where the CPU has VNNI, are checked against their
// own float64 reference in tests/unit/kernels/test_matmul_act8.cpp).
struct F32Activations {
  infokv::CpuActivations before = infokv::cpu_activations();
  F32Activations() { infokv::set_cpu_activations(infokv::CpuActivations::f32); }
  ~F32Activations() { infokv::set_cpu_activations(before); }
};

TEST(QuantMatmul, MatchesFloat64DotOfDequantisedRowsOnOneAndTwoThreads) {
  const F32Activations exact;
  std::mt19937_64 rng(42);
  infokv::ThreadPool pool2(2);
  for (GgmlType t : kQuantTypes) {
    const infokv::GgmlTypeTraits tr = infokv::ggml_type_traits(u(t));
    const int64_t k = tr.block_elems == 32 ? 544 : 512, m = 37;  // 17 blocks: an odd count for the 32-wide types
    const std::vector<uint8_t> w = infokv_test::random_quant_blocks(t, static_cast<size_t>(m * k / tr.block_elems), 0.01f, rng);
    std::vector<float> wf(static_cast<size_t>(m * k));
    ASSERT_TRUE(infokv::cpu::dequantize(wf.data(), w.data(), u(t), m * k));
    for (int64_t n : {1, 3, 4, 9, 40}) {  // decode's fused dots, the tiles, and (AVX-512, 16 or more) the panels
      std::vector<float> x(static_cast<size_t>(n * k));
      std::normal_distribution<float> nd(0, 1);
      for (float &v : x) v = nd(rng);
      for (infokv::ThreadPool *pool : {static_cast<infokv::ThreadPool *>(nullptr), &pool2}) {
        std::vector<float> out(static_cast<size_t>(n * m), NAN);
        ASSERT_TRUE(infokv::cpu::matmul(out.data(), x.data(), w.data(), u(t), n, m, k, pool)) << tr.name;
        for (int64_t i = 0; i < n; ++i)
          for (int64_t r = 0; r < m; ++r) {
            double ref = 0, mag = 0;
            for (int64_t j = 0; j < k; ++j) {
              ref += static_cast<double>(x[i * k + j]) * wf[r * k + j];
              mag += std::fabs(static_cast<double>(x[i * k + j]) * wf[r * k + j]);
            }
            ASSERT_NEAR(out[i * m + r], ref, 1e-5 * mag + 1e-6) << tr.name << " n=" << n << " row " << r;
          }
      }
    }
  }
}

// A row's result must be the same bits whether it is computed with its neighbours, alone, or at another split
// between threads (m * k is over the threshold that shares a product between threads): a guard for any kernel that
// runs rows side by side (two rows sharing the loads of x were tried, and were slower: two interleaved streams).
TEST(QuantMatmul, ARowsResultDoesNotDependOnTheRowsBesideIt) {
  std::mt19937_64 rng(11);
  infokv::ThreadPool pool2(2);
  for (GgmlType t : kQuantTypes) {
    const infokv::GgmlTypeTraits tr = infokv::ggml_type_traits(u(t));
    const int64_t k = 768, m = 173, row_bytes = k / static_cast<int64_t>(tr.block_elems) * static_cast<int64_t>(tr.block_bytes);
    const std::vector<uint8_t> w = infokv_test::random_quant_blocks(t, static_cast<size_t>(m * k / tr.block_elems), 0.01f, rng);
    for (int64_t n : {1, 2, 20}) {  // 20: the panels of AVX-512 prefill (12 rows at a time)
      std::vector<float> x(static_cast<size_t>(n * k));
      std::normal_distribution<float> nd(0, 1);
      for (float &v : x) v = nd(rng);
      std::vector<float> all(static_cast<size_t>(n * m)), all2(all.size()), one(static_cast<size_t>(n));
      ASSERT_TRUE(infokv::cpu::matmul(all.data(), x.data(), w.data(), u(t), n, m, k, nullptr)) << tr.name;
      ASSERT_TRUE(infokv::cpu::matmul(all2.data(), x.data(), w.data(), u(t), n, m, k, &pool2)) << tr.name;
      EXPECT_EQ(0, std::memcmp(all.data(), all2.data(), all.size() * 4)) << tr.name << " n=" << n;
      for (int64_t r = 0; r < m; ++r) {
        ASSERT_TRUE(infokv::cpu::matmul(one.data(), x.data(), w.data() + r * row_bytes, u(t), n, 1, k, nullptr));
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(0, std::memcmp(&one[static_cast<size_t>(i)], &all[static_cast<size_t>(i * m + r)], 4)) << tr.name << " n=" << n << " row " << r;
      }
    }
  }
}

// A prefill-sized product expands quantised rows to f32 exactly (every type but Q4_1, whose AVX2 expansion rounds
// q * d + m once) and multiplies them in f32: with AVX2 through the same tiles as f32 weights, so the result is the
// bits of the f32 product of the dequantised rows; with AVX-512 and 16 tokens or more through tile::run_panels,
// where every output is one FMA chain over k in order, so the result is the bits of that chain over the dequantised
// rows. On one thread and two, over shapes with fewer than 16 tokens, with full and short (<= 16) panels, several
// token chunks, and more tokens than one packing span (512). The portable path has its own loops, so this holds on
// AVX2 and up only.
TEST(QuantMatmul, PrefillIsTheBitsOfTheF32ProductOfTheDequantisedRows) {
  if (!infokv::cpu_has_avx2_fma_f16c()) GTEST_SKIP() << "portable kernels";
  const F32Activations exact;  // the f32 path (integer activations: MatmulI16.*)
  const bool panels = infokv::cpu_has_avx512();
  std::mt19937_64 rng(23);
  infokv::ThreadPool pool2(2);
  struct Shape {
    int64_t k, m, n;
  };
  for (const Shape sh : {Shape{512, 13, 9}, Shape{768, 30, 140}, Shape{256, 20, 600}}) {
    for (GgmlType t : kQuantTypes) {
      if (t == GgmlType::Q4_1) continue;
      const infokv::GgmlTypeTraits tr = infokv::ggml_type_traits(u(t));
      const int64_t k = sh.k, m = sh.m, n = sh.n;
      const std::vector<uint8_t> w = infokv_test::random_quant_blocks(t, static_cast<size_t>(m * k / tr.block_elems), 0.01f, rng);
      std::vector<float> wf(static_cast<size_t>(m * k)), x(static_cast<size_t>(n * k));
      ASSERT_TRUE(infokv::cpu::dequantize(wf.data(), w.data(), u(t), m * k));
      std::normal_distribution<float> nd(0, 1);
      for (float &v : x) v = nd(rng);
      std::vector<float> want(static_cast<size_t>(n * m), NAN);
      if (panels && n >= 16) {
        for (int64_t i = 0; i < n; ++i)
          for (int64_t r = 0; r < m; ++r) {
            float s = 0.0f;
            for (int64_t j = 0; j < k; ++j) s = std::fma(x[i * k + j], wf[r * k + j], s);
            want[i * m + r] = s;
          }
      } else {
        ASSERT_TRUE(infokv::cpu::matmul(want.data(), x.data(), wf.data(), u(GgmlType::F32), n, m, k, nullptr));
      }
      for (infokv::ThreadPool *pool : {static_cast<infokv::ThreadPool *>(nullptr), &pool2}) {
        std::vector<float> q(want.size(), NAN);
        ASSERT_TRUE(infokv::cpu::matmul(q.data(), x.data(), w.data(), u(t), n, m, k, pool));
        EXPECT_EQ(0, std::memcmp(q.data(), want.data(), q.size() * 4))
            << tr.name << " k=" << k << " n=" << n << (pool ? " two threads" : " one thread");
      }
    }
  }
}

// matmul_parts (a layer's q, k, v or gate, up in one hand-off): every part's outputs are the bits of matmul of that
// part alone, for a lone token (the shared split) and for a batch, on one thread and two; for every quantised type,
// f32, and f16 in the grouped layout (split only at its 32-row groups; 200 rows leave a padded last group). An
// unsupported type or a k that is not whole blocks is refused with nothing written.
TEST(QuantMatmul, PartsAreTheBitsOfEachPartAlone) {
  std::mt19937_64 rng(31);
  infokv::ThreadPool pool2(2);
  std::vector<uint32_t> types;
  for (GgmlType t : kQuantTypes) types.push_back(u(t));
  types.push_back(u(GgmlType::F32));
  types.push_back(infokv::cpu::kF16Grouped);
  const int64_t k = 512;
  const std::vector<int64_t> ms = {576, 200, 192};  // q, k, v of a small model, one not a multiple of 32
  for (uint32_t type : types) {
    std::vector<std::vector<uint8_t>> w;
    for (int64_t m : ms) {
      if (type == u(GgmlType::F32)) {
        std::vector<float> f(static_cast<size_t>(m * k));
        std::normal_distribution<float> nd(0, 0.05f);
        for (float &v : f) v = nd(rng);
        w.emplace_back(reinterpret_cast<const uint8_t *>(f.data()), reinterpret_cast<const uint8_t *>(f.data() + f.size()));
      } else if (type == infokv::cpu::kF16Grouped) {
        std::vector<uint16_t> h(static_cast<size_t>(m * k));
        std::normal_distribution<float> nd(0, 0.05f);
        for (uint16_t &v : h) v = infokv::float_to_fp16(nd(rng));
        std::vector<uint16_t> g(static_cast<size_t>(infokv::cpu::grouped_elems(m, k)));
        infokv::cpu::group_rows(g.data(), h.data(), m, k, nullptr);
        w.emplace_back(reinterpret_cast<const uint8_t *>(g.data()), reinterpret_cast<const uint8_t *>(g.data() + g.size()));
      } else {
        const infokv::GgmlTypeTraits tr = infokv::ggml_type_traits(type);
        w.push_back(infokv_test::random_quant_blocks(static_cast<GgmlType>(type), static_cast<size_t>(m * k / tr.block_elems), 0.01f, rng));
      }
    }
    for (int64_t n : {1, 3}) {
      std::vector<float> x(static_cast<size_t>(n * k));
      std::normal_distribution<float> nd(0, 1);
      for (float &v : x) v = nd(rng);
      for (infokv::ThreadPool *pool : {static_cast<infokv::ThreadPool *>(nullptr), &pool2}) {
        std::vector<std::vector<float>> alone, got;
        std::vector<infokv::cpu::MatmulPart> parts;
        for (size_t i = 0; i < ms.size(); ++i) {
          alone.emplace_back(static_cast<size_t>(n * ms[i]), NAN);
          got.emplace_back(static_cast<size_t>(n * ms[i]), NAN);
          ASSERT_TRUE(infokv::cpu::matmul(alone[i].data(), x.data(), w[i].data(), type, n, ms[i], k, pool));
        }
        for (size_t i = 0; i < ms.size(); ++i) parts.push_back({got[i].data(), w[i].data(), type, ms[i]});
        ASSERT_TRUE(infokv::cpu::matmul_parts(parts.data(), static_cast<int>(parts.size()), x.data(), n, k, pool));
        for (size_t i = 0; i < ms.size(); ++i)
          EXPECT_EQ(0, std::memcmp(alone[i].data(), got[i].data(), got[i].size() * 4))
              << "type " << type << " part " << i << " n=" << n << (pool ? " two threads" : " one thread");
      }
    }
  }
  // refusals: nothing written
  std::vector<float> x(64, 1.0f), out(8, 7.0f);
  std::vector<uint8_t> blocks(8 * 2 * 20, 0);
  infokv::cpu::MatmulPart bad[2] = {{out.data(), blocks.data(), u(GgmlType::Q4_1), 4}, {out.data() + 4, blocks.data(), u(GgmlType::Q2_K), 4}};
  EXPECT_FALSE(infokv::cpu::matmul_parts(bad, 2, x.data(), 1, 64, &pool2));
  infokv::cpu::MatmulPart partial[1] = {{out.data(), blocks.data(), u(GgmlType::Q4_1), 4}};
  EXPECT_FALSE(infokv::cpu::matmul_parts(partial, 1, x.data(), 1, 48, &pool2));
  for (float v : out) EXPECT_EQ(v, 7.0f);
}

TEST(QuantMatmul, EmbeddingRowsEqualDequantisedRows) {
  std::mt19937_64 rng(3);
  for (GgmlType t : kQuantTypes) {
    const infokv::GgmlTypeTraits tr = infokv::ggml_type_traits(u(t));
    const int64_t d = 512, rows = 5;
    const std::vector<uint8_t> w = infokv_test::random_quant_blocks(t, static_cast<size_t>(rows * d / tr.block_elems), 0.02f, rng);
    std::vector<float> all(static_cast<size_t>(rows * d)), row(static_cast<size_t>(d));
    ASSERT_TRUE(infokv::cpu::dequantize(all.data(), w.data(), u(t), rows * d));
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_TRUE(infokv::cpu::get_row(row.data(), w.data(), u(t), r, d));
      EXPECT_EQ(0, std::memcmp(row.data(), all.data() + r * d, static_cast<size_t>(d) * 4)) << tr.name << " row " << r;
    }
  }
}

// ---- a whole model ----

namespace {

constexpr int kEmbd = 256, kFf = 512, kVocab = 8, kHeads = 4, kKvHeads = 2;

// A one-layer Llama, every matrix (embedding too) of type `t` with the given blocks; when `as_f32`, the same
// values dequantised and stored as F32 instead.
std::string write_tiny_model(GgmlType t, bool as_f32, uint64_t seed, const std::string &path) {
  std::mt19937_64 rng(seed);
  GgufBuilder b;
  std::vector<std::string> toks = {"<unk>", "<s>", "</s>", "\xE2\x96\x81" "a", "b", "c", "d", "e"};
  b.add_string("general.architecture", "llama")
      .add_u32("llama.embedding_length", kEmbd)
      .add_u32("llama.block_count", 1)
      .add_u32("llama.attention.head_count", kHeads)
      .add_u32("llama.attention.head_count_kv", kKvHeads)
      .add_u32("llama.feed_forward_length", kFf)
      .add_u32("llama.context_length", 64)
      .add_string("tokenizer.ggml.model", "llama")
      .add_string_array("tokenizer.ggml.tokens", toks)
      .add_f32_array("tokenizer.ggml.scores", std::vector<float>(toks.size(), 0.0f))
      .add_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1, 1, 1});
  const int hd = kEmbd / kHeads;
  auto mat = [&](const std::string &name, uint64_t cols, uint64_t rows, float scale) {
    const infokv::GgmlTypeTraits tr = infokv::ggml_type_traits(u(t));
    std::vector<uint8_t> q = infokv_test::random_quant_blocks(t, cols * rows / tr.block_elems, scale, rng);
    if (as_f32) {
      std::vector<float> f(cols * rows);
      infokv::cpu::dequantize(f.data(), q.data(), u(t), static_cast<int64_t>(f.size()));
      b.add_tensor_f32(name, {cols, rows}, f);
    } else {
      b.add_tensor(name, u(t), {cols, rows}, q.data(), q.size());
    }
  };
  mat("token_embd.weight", kEmbd, kVocab, 0.05f);
  b.add_tensor_f32("output_norm.weight", {kEmbd}, std::vector<float>(kEmbd, 1.0f));
  b.add_tensor_f32("blk.0.attn_norm.weight", {kEmbd}, std::vector<float>(kEmbd, 1.0f));
  b.add_tensor_f32("blk.0.ffn_norm.weight", {kEmbd}, std::vector<float>(kEmbd, 1.0f));
  mat("blk.0.attn_q.weight", kEmbd, kHeads * hd, 0.01f);
  mat("blk.0.attn_k.weight", kEmbd, kKvHeads * hd, 0.01f);
  mat("blk.0.attn_v.weight", kEmbd, kKvHeads * hd, 0.01f);
  mat("blk.0.attn_output.weight", kHeads * hd, kEmbd, 0.01f);
  mat("blk.0.ffn_gate.weight", kEmbd, kFf, 0.01f);
  mat("blk.0.ffn_up.weight", kEmbd, kFf, 0.01f);
  mat("blk.0.ffn_down.weight", kFf, kEmbd, 0.01f);
  const std::vector<uint8_t> bytes = b.build();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return path;
}

std::vector<float> run_logits(const std::string &path, int threads) {
  const infokv_test::Prefilled p = infokv_test::prefill_f32(infokv::Model::load(path), {1, 3, 4, 5, 6, 7}, threads);
  std::vector<float> out = p.logits();
  p.s->decode({{p.seq, 4, false}});  // one decode step after the prefill
  out.insert(out.end(), p.logits().begin(), p.logits().end());
  return out;
}

std::string tmp_path(const std::string &name) {
  return (std::filesystem::temp_directory_path() / ("infokv_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

}  // namespace

TEST(QuantModel, EveryTypeGivesTheLogitsOfItsDequantisedF32Twin) {
  for (GgmlType t : kQuantTypes) {
    const std::string name = infokv::ggml_type_name(u(t));
    const std::string pq = write_tiny_model(t, false, 11, tmp_path(name + "_q.gguf"));
    const std::string pf = write_tiny_model(t, true, 11, tmp_path(name + "_f.gguf"));
    for (int threads : {1, 2}) {
      const std::vector<float> lq = run_logits(pq, threads), lf = run_logits(pf, threads);
      ASSERT_EQ(lq.size(), lf.size());
      float mag = 0;
      for (float v : lf) mag = std::max(mag, std::fabs(v));
      ASSERT_GT(mag, 0.0f) << name;
      for (size_t k = 0; k < lq.size(); ++k) {
        ASSERT_TRUE(std::isfinite(lq[k])) << name;
        EXPECT_NEAR(lq[k], lf[k], 1e-4f * mag + 1e-6f) << name << " logit " << k << " threads " << threads;
      }
    }
    std::filesystem::remove(pq);
    std::filesystem::remove(pf);
  }
}

TEST(QuantModel, UnsupportedTypeIsRejectedNamingTypeAndTensor) {
  // Q2_K is a valid GGUF type (the reader accepts its geometry) with no kernel here.
  std::vector<std::string> toks = {"<unk>", "<s>", "</s>", "a"};
  GgufBuilder m;
  m.add_string("general.architecture", "llama")
      .add_u32("llama.embedding_length", kEmbd)
      .add_u32("llama.block_count", 1)
      .add_u32("llama.attention.head_count", kHeads)
      .add_u32("llama.feed_forward_length", kFf)
      .add_string("tokenizer.ggml.model", "llama")
      .add_string_array("tokenizer.ggml.tokens", toks);
  std::vector<uint8_t> q2(kEmbd * 4 / 256 * 84, 0);
  m.add_tensor("token_embd.weight", u(GgmlType::Q2_K), {kEmbd, 4}, q2.data(), q2.size());
  const std::vector<uint8_t> bytes = m.build();
  const std::string path = tmp_path("q2k.gguf");
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  try {
    infokv::Model::load(path);
    ADD_FAILURE() << "Q2_K model loaded";
  } catch (const infokv::Error &e) {
    EXPECT_EQ(e.status(), infokv::Status::unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("Q2_K"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("token_embd.weight"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}
