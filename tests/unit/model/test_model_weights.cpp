// Load-time value checks of weights: a NaN or Inf in a norm or in the token embedding (any storage type) is
// refused with bad_model naming the tensor, instead of a model that samples token 0 forever.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <string>

#include "gguf/gguf.hpp"
#include "kernels/ggml_types.hpp"
#include "model/model.hpp"
#include "model/weight_check.hpp"
#include "support/quant_blocks.hpp"
#include "support/util.hpp"
#include "util/error.hpp"

namespace {

using infokv::GgmlType;
using infokv_test::TempFile;
using infokv_test::TensorEdit;

// The status and message of loading stories260K re-written through `edit`.
infokv::Status load_edited(const infokv_test::TensorEditor &edit, std::string *msg) {
  const auto &b = infokv_test::stories_bytes();
  infokv::GgufFile src(b.data(), b.size());
  TempFile f(infokv_test::rewrite_gguf(src, edit).build());
  try {
    infokv::Model::load(f.path());
    return infokv::Status::ok;
  } catch (const infokv::Error &e) {
    *msg = e.what();
    return e.status();
  }
}

void set_f32(TensorEdit &e, size_t i, float v) {
  ASSERT_EQ(e.type, 0u) << e.name;
  ASSERT_LT(i * 4, e.data.size());
  std::memcpy(e.data.data() + 4 * i, &v, 4);
}

TEST(ModelWeights, NanInANormIsRefusedNamingTheTensor) {
  REQUIRE_STORIES_BYTES();
  for (const char *name : {"blk.2.ffn_norm.weight", "blk.0.attn_norm.weight", "output_norm.weight"}) {
    std::string msg;
    const infokv::Status st = load_edited([&](TensorEdit &e) {
      if (e.name == name) set_f32(e, 11, std::nanf(""));
      return true;
    }, &msg);
    EXPECT_EQ(st, infokv::Status::bad_model) << msg;
    EXPECT_NE(msg.find(std::string("tensor '") + name + "' holds a non-finite value (NaN) at element 11"), std::string::npos) << msg;
  }
}

TEST(ModelWeights, InfInAnEmbeddingRowIsRefusedNamingTheTensorAndRow) {
  REQUIRE_STORIES_BYTES();
  std::string msg;
  int64_t d = 0;
  const infokv::Status st = load_edited([&](TensorEdit &e) {
    if (e.name == "token_embd.weight") {
      d = static_cast<int64_t>(e.ne[0]);
      set_f32(e, static_cast<size_t>(300 * d + 7), INFINITY);
    }
    return true;
  }, &msg);
  EXPECT_EQ(st, infokv::Status::bad_model) << msg;
  EXPECT_NE(msg.find("tensor 'token_embd.weight' holds a non-finite value (+Inf) in row 300 (column 7)"), std::string::npos) << msg;
}

// A quantised embedding is checked after dequantisation: an Inf block minimum (Q4_1's m) poisons its 32 values.
TEST(ModelWeights, InfScaleInAQuantisedEmbeddingIsRefused) {
  REQUIRE_STORIES_BYTES();
  for (bool poison : {false, true}) {
    std::string msg;
    const infokv::Status st = load_edited([&](TensorEdit &e) {
      if (e.name != "token_embd.weight") return true;
      const infokv::GgmlTypeTraits tr = infokv::ggml_type_traits(static_cast<uint32_t>(GgmlType::Q4_1));
      const uint64_t d = e.ne[0], rows = e.ne[1], blocks_per_row = d / tr.block_elems;
      std::mt19937_64 rng(5);
      e.type = static_cast<uint32_t>(GgmlType::Q4_1);
      e.data = infokv_test::random_quant_blocks(GgmlType::Q4_1, rows * blocks_per_row, 0.05f, rng);
      if (poison) {
        const uint16_t inf = 0x7c00;
        std::memcpy(e.data.data() + (42 * blocks_per_row + 1) * tr.block_bytes + 2, &inf, 2);  // row 42, block 1's m
      }
      return true;
    }, &msg);
    if (!poison) {
      EXPECT_EQ(st, infokv::Status::ok) << msg;
      continue;
    }
    EXPECT_EQ(st, infokv::Status::bad_model) << msg;
    EXPECT_NE(msg.find("tensor 'token_embd.weight' holds a non-finite value (+Inf) in row 42 (column 32)"), std::string::npos) << msg;
  }
}

TEST(ModelWeights, ValidModelsStillLoad) {
  REQUIRE_STORIES_BYTES();
  EXPECT_NO_THROW(infokv::Model::load(infokv_test::stories_path()));
  const std::string smol = infokv_test::smollm2_path();
  if (smol.empty()) GTEST_SKIP() << "SmolLM2 not configured";
  EXPECT_NO_THROW(infokv::Model::load(smol));
}

}  // namespace
