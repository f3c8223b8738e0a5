// GGUF reader and model loading against hostile input: truncations of the real file at every offset of its first
// 64 KiB (and samples beyond), random byte flips, crafted headers (magic, versions, absurd counts and lengths,
// nested arrays, unknown types, bad dimensions, overflowing sizes, misaligned / out-of-file offsets, duplicates),
// semantic errors in Model::load, a metadata round trip of every value type, and F16 / BF16 copies of stories260K
// whose logits must stay close to the F32 model's.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>

#include "gguf/gguf.hpp"
#include "kernels/fp16.hpp"
#include "kernels/ggml_types.hpp"
#include "model/model.hpp"
#include "session/session.hpp"
#include "support/util.hpp"
#include "tokenizer/tokenizer.hpp"
#include "util/error.hpp"
#include "support/random_inputs.hpp"

using infokv::Error;
using infokv::GgufFile;
using infokv::GgufValueType;
using infokv::Model;
using infokv::Status;
using infokv_test::GgufBuilder;
using infokv_test::GgufType;
using infokv_test::TempFile;
using infokv_test::TensorEdit;

namespace {

constexpr uint64_t kHuge = uint64_t{1} << 63;

using infokv_test::status_of;

bool is_rejection(Status s) { return s == Status::bad_model || s == Status::unsupported || s == Status::io; }

// Parses an exact-size heap copy, so that AddressSanitizer sees any read past the end.
Status parse_status(const std::vector<uint8_t> &bytes, size_t len, std::string *msg = nullptr) {
  std::vector<uint8_t> copy(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(len));
  return status_of([&] { GgufFile f(copy.data(), copy.size()); }, msg);
}
Status parse_status(const std::vector<uint8_t> &bytes, std::string *msg = nullptr) {
  return parse_status(bytes, bytes.size(), msg);
}

Status load_status(const std::vector<uint8_t> &bytes, std::string *msg = nullptr) {
  TempFile f(bytes);
  return status_of([&] { Model::load(f.path()); }, msg);
}

// End of the last tensor's data in the real file: every shorter prefix is invalid.
size_t stories_data_end() {
  const auto &b = infokv_test::stories_bytes();
  GgufFile f(b.data(), b.size());
  size_t end = 0;
  for (const auto &t : f.tensors()) end = std::max(end, static_cast<size_t>(t.data - b.data()) + static_cast<size_t>(t.n_bytes));
  return end;
}

// ---- a tiny synthetic llama model (n_ff = 256 so that a Q4_K ffn_down is well-formed at the GGUF level) ----

struct TinySpec {
  int n_embd = 8, n_head = 2, n_head_kv = 1, n_ff = 256, n_layer = 1;
};

std::vector<float> ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(static_cast<int>((i * 7919u) % 17u) - 8) / 8.0f;
  return v;
}

const std::vector<std::string> kTinyVocab = {"<unk>", "<s>", "</s>", "\xE2\x96\x81" "a", "b", "c", "\xE2\x96\x81", "ab"};

GgufBuilder tiny_llama(const TinySpec &s = TinySpec()) {
  const uint64_t d = static_cast<uint64_t>(s.n_embd), hd = d / static_cast<uint64_t>(s.n_head);
  const uint64_t kv = hd * static_cast<uint64_t>(s.n_head_kv), ff = static_cast<uint64_t>(s.n_ff);
  const uint64_t V = kTinyVocab.size();
  GgufBuilder b;
  b.add_string("general.architecture", "llama")
      .add_string("general.name", "tiny")
      .add_u32("llama.embedding_length", static_cast<uint32_t>(s.n_embd))
      .add_u32("llama.block_count", static_cast<uint32_t>(s.n_layer))
      .add_u32("llama.attention.head_count", static_cast<uint32_t>(s.n_head))
      .add_u32("llama.attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv))
      .add_u32("llama.feed_forward_length", static_cast<uint32_t>(s.n_ff))
      .add_u32("llama.context_length", 64)
      .add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f)
      .add_f32("llama.rope.freq_base", 10000.0f)
      .add_string("tokenizer.ggml.model", "llama")
      .add_string_array("tokenizer.ggml.tokens", kTinyVocab)
      .add_f32_array("tokenizer.ggml.scores", {0, 0, 0, -1, -2, -3, -4, -0.5f})
      .add_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1, 1, 1})
      .add_u32("tokenizer.ggml.bos_token_id", 1)
      .add_u32("tokenizer.ggml.eos_token_id", 2);
  b.add_tensor_f32("token_embd.weight", {d, V}, ramp(d * V, 0.5f));
  b.add_tensor_f32("output_norm.weight", {d}, std::vector<float>(d, 1.0f));
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    b.add_tensor_f32(p + "attn_norm.weight", {d}, std::vector<float>(d, 1.0f));
    b.add_tensor_f32(p + "attn_q.weight", {d, d}, ramp(d * d, 0.1f));
    b.add_tensor_f32(p + "attn_k.weight", {d, kv}, ramp(d * kv, 0.1f));
    b.add_tensor_f32(p + "attn_v.weight", {d, kv}, ramp(d * kv, 0.1f));
    b.add_tensor_f32(p + "attn_output.weight", {d, d}, ramp(d * d, 0.1f));
    b.add_tensor_f32(p + "ffn_norm.weight", {d}, std::vector<float>(d, 1.0f));
    b.add_tensor_f32(p + "ffn_gate.weight", {d, ff}, ramp(d * ff, 0.05f));
    b.add_tensor_f32(p + "ffn_up.weight", {d, ff}, ramp(d * ff, 0.05f));
    b.add_tensor_f32(p + "ffn_down.weight", {ff, d}, ramp(d * ff, 0.05f));
  }
  return b;
}

// The tiny model re-written with an edit (tensor editor and/or metadata filter).
std::vector<uint8_t> tiny_edited(const infokv_test::TensorEditor &edit, const infokv_test::MetaFilter &keep = nullptr,
                                 const std::function<void(GgufBuilder &)> &extra = nullptr) {
  const std::vector<uint8_t> base = tiny_llama().build();
  GgufFile f(base.data(), base.size());
  GgufBuilder b = infokv_test::rewrite_gguf(f, edit, keep);
  if (extra) extra(b);
  return b.build();
}

// ---- header helpers for crafted files ----

std::vector<uint8_t> header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
  infokv_test::ByteWriter w;
  w.raw("GGUF", 4);
  w.le(version);
  w.le(n_tensors);
  w.le(n_kv);
  return w.bytes;
}

}  // namespace

// ================================================================================================================
// Truncation and corruption of the real file
// ================================================================================================================

TEST(GgufHostile, RealFileParsesAndHasTheDocumentedLayout) {
  REQUIRE_STORIES_BYTES();
  const auto &b = infokv_test::stories_bytes();
  GgufFile f(b.data(), b.size());
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.tensors().size(), 48u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.get_string("general.architecture", ""), "llama");
  for (const auto &t : f.tensors()) EXPECT_EQ(t.type, 0u) << t.name;
}

TEST(GgufHostile, TruncationAtEveryOffsetOfTheFirst64KiBIsRejected) {
  REQUIRE_STORIES_BYTES();
  const auto &b = infokv_test::stories_bytes();
  const size_t data_end = stories_data_end();
  const size_t limit = std::min<size_t>(64 * 1024, b.size());
  size_t failures = 0;
  for (size_t len = 0; len < limit && failures < 10; ++len) {
    std::string msg;
    Status s = parse_status(b, len, &msg);
    if (len < data_end) {
      if (s != Status::bad_model) {
        ++failures;
        ADD_FAILURE() << "prefix of " << len << " bytes: status " << static_cast<int>(s) << " (" << msg << ")";
      }
    } else {
      EXPECT_EQ(s, Status::ok) << len << ": " << msg;
    }
  }
}

TEST(GgufHostile, TruncationAtSampledOffsetsBeyond64KiBIsRejected) {
  REQUIRE_STORIES_BYTES();
  const auto &b = infokv_test::stories_bytes();
  const size_t data_end = stories_data_end();
  ASSERT_GT(b.size(), 64u * 1024);
  // The data section must end at the file's end (or within its last alignment padding).
  EXPECT_LE(b.size() - data_end, 32u);
  std::vector<size_t> offsets;
  const size_t span = b.size() - 64 * 1024;
  for (size_t k = 0; k < 200; ++k) offsets.push_back(64 * 1024 + span * k / 200);
  offsets.push_back(data_end - 1);
  for (size_t len : offsets) {
    std::string msg;
    EXPECT_EQ(parse_status(b, len, &msg), Status::bad_model) << "prefix of " << len << " bytes: " << msg;
  }
  EXPECT_EQ(parse_status(b, data_end), Status::ok);
}

TEST(GgufHostile, TruncatedFilesAreRejectedByModelLoad) {
  REQUIRE_STORIES_BYTES();
  const auto &b = infokv_test::stories_bytes();
  std::vector<size_t> offsets = {0, 1, 3, 4, 7, 8, 15, 16, 23, 24, 31, 100, 1000};
  for (size_t len = 2000; len < b.size(); len += b.size() / 60) offsets.push_back(len);
  offsets.push_back(b.size() - 1);
  for (size_t len : offsets) {
    std::string msg;
    std::vector<uint8_t> prefix(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(len));
    Status s = load_status(prefix, &msg);
    EXPECT_TRUE(is_rejection(s)) << "prefix of " << len << " bytes: status " << static_cast<int>(s) << " " << msg;
    EXPECT_FALSE(msg.empty());
  }
}

TEST(GgufHostile, MissingAndEmptyFilesAreIoOrBadModel) {
  std::string msg;
  EXPECT_EQ(status_of([&] { Model::load("/nonexistent/dir/model.gguf"); }, &msg), Status::io);
  EXPECT_NE(msg.find("/nonexistent/dir/model.gguf"), std::string::npos) << msg;
  EXPECT_EQ(status_of([&] { Model::load("/tmp"); }), Status::io);  // a directory
  EXPECT_EQ(load_status({}), Status::bad_model);
  EXPECT_EQ(parse_status({}), Status::bad_model);
  EXPECT_EQ(status_of([] { GgufFile f(nullptr, 0); }), Status::bad_model);
}

// Random byte flips, half of them inside the header region (metadata and tensor infos), replayed through the parser
// and, when the header survives, through the tokenizer; a sample also through Model::load. A few thousand
// mutations: the GCC build's stand-in for the libFuzzer target in tests/fuzz/.
TEST(GgufHostile, RandomByteFlipsNeverCrash) {
  REQUIRE_STORIES_BYTES();
  const auto &orig = infokv_test::stories_bytes();
  std::mt19937_64 rng(infokv_test::test_seed());
  GgufFile ref(orig.data(), orig.size());
  const size_t header_end = static_cast<size_t>(ref.tensors().front().data - orig.data());
  int parsed = 0, rejected = 0, loaded = 0, load_rejected = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> m = orig;
    const int n_flips = 1 + static_cast<int>(rng() % 8);
    const bool in_header = (iter % 2) == 0;
    for (int k = 0; k < n_flips; ++k) {
      size_t at = static_cast<size_t>(rng() % (in_header ? header_end : m.size()));
      switch (rng() % 3) {
        case 0: m[at] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;  // one bit
        case 1: m[at] = static_cast<uint8_t>(rng()); break;                // a random byte
        default: m[at] = (rng() % 2) ? 0xff : 0x00; break;                 // extremes (lengths, counts)
      }
    }
    std::string msg;
    Status s = status_of([&] {
      GgufFile f(m.data(), m.size());
      (void)infokv::Tokenizer::from_gguf(f);
    }, &msg);
    if (s == Status::ok) ++parsed;
    else ++rejected;
    ASSERT_TRUE(s == Status::ok || is_rejection(s)) << "iteration " << iter << ": status " << static_cast<int>(s) << " " << msg;
    if (iter % 30 == 0) {
      Status ls = load_status(m, &msg);
      ASSERT_TRUE(ls == Status::ok || is_rejection(ls)) << "load, iteration " << iter << ": " << msg;
      (ls == Status::ok ? loaded : load_rejected)++;
    }
  }
  RecordProperty("parsed", parsed);
  RecordProperty("rejected", rejected);
  EXPECT_GT(rejected, 0);
  EXPECT_GT(loaded + load_rejected, 0);
}

// ================================================================================================================
// Crafted headers
// ================================================================================================================

TEST(GgufCrafted, WrongMagicIsRejected) {
  for (const char *magic : {"GGUG", "gguf", "FUGG", "\0\0\0\0", "GGML", "GGJT"}) {
    std::vector<uint8_t> b = GgufBuilder().add_u32("x", 1).build();
    std::memcpy(b.data(), magic, 4);
    std::string msg;
    EXPECT_EQ(parse_status(b, &msg), Status::bad_model) << magic;
    EXPECT_NE(msg.find("magic"), std::string::npos) << msg;
  }
  EXPECT_EQ(parse_status({'G', 'G', 'U'}), Status::bad_model);
}

TEST(GgufCrafted, Version1AndPlausibleNewerVersionsAreUnsupportedAnd2And3Parse) {
  for (uint32_t v : {1u, 4u, 255u}) {
    std::string msg;
    EXPECT_EQ(parse_status(GgufBuilder().set_version(v).add_u32("x", 1).build(), &msg), Status::unsupported) << v;
    EXPECT_NE(msg.find("version"), std::string::npos) << msg;
  }
  for (uint32_t v : {2u, 3u}) {
    std::vector<uint8_t> b = GgufBuilder().set_version(v).add_u32("x", 7).add_tensor_f32("t", {2}, {1, 2}).build();
    GgufFile f(b.data(), b.size());
    EXPECT_EQ(f.version(), v);
    EXPECT_EQ(f.get_int("x", 0), 7);
  }
}

// The magic followed by garbage (the probe's file read as version 421816220) is damage, not a newer format.
TEST(GgufCrafted, AbsurdVersionsAreDamageNotUnsupported) {
  for (uint32_t v : {0u, 256u, 421816220u, 0xffffffffu}) {
    std::string msg;
    EXPECT_EQ(parse_status(GgufBuilder().set_version(v).add_u32("x", 1).build(), &msg), Status::bad_model) << v;
    EXPECT_NE(msg.find("not a GGUF file or damaged: version " + std::to_string(v)), std::string::npos) << msg;
  }
  std::vector<uint8_t> junk = {'G', 'G', 'U', 'F'};
  for (int i = 0; i < 60; ++i) junk.push_back(static_cast<uint8_t>(0x9c + 37 * i));
  EXPECT_EQ(parse_status(junk), Status::bad_model);
}

TEST(GgufCrafted, AbsurdCountsAreRejectedWithoutAllocating) {
  for (uint64_t n : {kHuge, ~uint64_t{0}, uint64_t{1} << 40, uint64_t{1000000}}) {
    EXPECT_EQ(parse_status(GgufBuilder().add_u32("x", 1).override_kv_count(n).build()), Status::bad_model) << n;
    EXPECT_EQ(parse_status(GgufBuilder().add_u32("x", 1).override_tensor_count(n).build()), Status::bad_model) << n;
  }
  // Counts one too many: the file ends where the next item would start.
  EXPECT_EQ(parse_status(GgufBuilder().add_u32("x", 1).override_kv_count(2).build()), Status::bad_model);
  EXPECT_EQ(parse_status(GgufBuilder().add_tensor_f32("t", {2}, {1, 2}).override_tensor_count(2).build()), Status::bad_model);
  // Bare headers.
  EXPECT_EQ(parse_status(header(3, 0, 0)), Status::ok);
  EXPECT_EQ(parse_status(header(3, kHuge, 0)), Status::bad_model);
  EXPECT_EQ(parse_status(header(3, 0, kHuge)), Status::bad_model);
}

TEST(GgufCrafted, AbsurdStringAndArrayLengthsAreRejected) {
  for (uint64_t len : {kHuge, ~uint64_t{0}, uint64_t{1} << 32, uint64_t{100}}) {
    // key length
    std::vector<uint8_t> b = header(3, 0, 1);
    infokv_test::ByteWriter w;
    w.le<uint64_t>(len);
    w.raw("abc", 3);
    b.insert(b.end(), w.bytes.begin(), w.bytes.end());
    EXPECT_EQ(parse_status(b), Status::bad_model) << "key length " << len;
    // string value length
    infokv_test::ByteWriter sv;
    sv.le<uint64_t>(len);
    sv.raw("xyz", 3);
    EXPECT_EQ(parse_status(GgufBuilder().add_raw("k", 8, sv.bytes).build()), Status::bad_model) << "string " << len;
    // numeric array length
    for (uint32_t et : {0u, 4u, 10u, 12u}) {
      infokv_test::ByteWriter a;
      a.le<uint32_t>(et);
      a.le<uint64_t>(len);
      a.le<uint64_t>(0);
      EXPECT_EQ(parse_status(GgufBuilder().add_raw("k", 9, a.bytes).build()), Status::bad_model) << "array " << et << " " << len;
    }
    // string array length, and a string inside an array with an absurd length
    infokv_test::ByteWriter sa;
    sa.le<uint32_t>(8);
    sa.le<uint64_t>(len);
    EXPECT_EQ(parse_status(GgufBuilder().add_raw("k", 9, sa.bytes).build()), Status::bad_model);
    infokv_test::ByteWriter sb;
    sb.le<uint32_t>(8);
    sb.le<uint64_t>(2);
    sb.str("ok");
    sb.le<uint64_t>(len);
    EXPECT_EQ(parse_status(GgufBuilder().add_raw("k", 9, sb.bytes).build()), Status::bad_model);
    // tensor name length
    std::vector<uint8_t> t = header(3, 1, 0);
    t.insert(t.end(), w.bytes.begin(), w.bytes.end());
    EXPECT_EQ(parse_status(t), Status::bad_model);
  }
}

TEST(GgufCrafted, NestedArraysParseToTheLimitAndDeeperOnesAreRejected) {
  // array of 2 arrays of 3 uint8: allowed (nesting depth 2), the outer value records its element type and count
  infokv_test::ByteWriter a;
  a.le<uint32_t>(9);
  a.le<uint64_t>(2);
  for (int k = 0; k < 2; ++k) {
    a.le<uint32_t>(0);
    a.le<uint64_t>(3);
    a.raw("\x01\x02\x03", 3);
  }
  std::vector<uint8_t> ok = GgufBuilder().add_raw("nested", 9, a.bytes).add_u32("after", 5).build();
  GgufFile f(ok.data(), ok.size());
  ASSERT_NE(f.find("nested"), nullptr);
  EXPECT_EQ(f.find("nested")->elem_type, GgufValueType::ARRAY);
  EXPECT_EQ(f.find("nested")->count, 2u);
  EXPECT_EQ(f.get_int("after", 0), 5);  // the reader skipped the nested bodies exactly

  // 64 levels deep: rejected (bounded recursion), as is an inner array running past the file
  infokv_test::ByteWriter deep;
  for (int k = 0; k < 64; ++k) {
    deep.le<uint32_t>(9);
    deep.le<uint64_t>(1);
  }
  deep.le<uint32_t>(0);
  deep.le<uint64_t>(0);
  EXPECT_EQ(parse_status(GgufBuilder().add_raw("deep", 9, deep.bytes).build()), Status::bad_model);
  infokv_test::ByteWriter huge_inner;
  huge_inner.le<uint32_t>(9);
  huge_inner.le<uint64_t>(1);
  huge_inner.le<uint32_t>(6);
  huge_inner.le<uint64_t>(kHuge);
  EXPECT_EQ(parse_status(GgufBuilder().add_raw("k", 9, huge_inner.bytes).build()), Status::bad_model);
  infokv_test::ByteWriter many_outer;
  many_outer.le<uint32_t>(9);
  many_outer.le<uint64_t>(kHuge);
  EXPECT_EQ(parse_status(GgufBuilder().add_raw("k", 9, many_outer.bytes).build()), Status::bad_model);
}

TEST(GgufCrafted, UnknownValueTypesAreRejected) {
  for (uint32_t t : {13u, 14u, 100u, 0x80000000u, 0xffffffffu}) {
    std::string msg;
    EXPECT_EQ(parse_status(GgufBuilder().add_raw("k", t, {0, 0, 0, 0, 0, 0, 0, 0}).build(), &msg), Status::bad_model) << t;
    EXPECT_NE(msg.find("'k'"), std::string::npos) << msg;
    infokv_test::ByteWriter a;
    a.le<uint32_t>(t);
    a.le<uint64_t>(1);
    a.le<uint64_t>(0);
    EXPECT_EQ(parse_status(GgufBuilder().add_raw("k", 9, a.bytes).build()), Status::bad_model) << "array of " << t;
  }
  // a bool that is neither 0 nor 1
  EXPECT_EQ(parse_status(GgufBuilder().add_raw("b", 7, {2}).build()), Status::bad_model);
}

TEST(GgufCrafted, UnknownTensorTypesAreRejected) {
  for (uint32_t t : {4u, 5u, 31u, 33u, 36u, 39u, 1000u, 0xffffffffu}) {
    std::string msg;
    EXPECT_EQ(parse_status(GgufBuilder().add_tensor("t", t, {32}, std::vector<uint8_t>(256).data(), 256).build(), &msg),
              Status::bad_model) << t;
    EXPECT_NE(msg.find("'t'"), std::string::npos) << msg;
  }
  // a known quantised type whose row is not a whole number of blocks
  EXPECT_EQ(parse_status(GgufBuilder().add_tensor("q", 12, {100}, std::vector<uint8_t>(144).data(), 144).build()), Status::bad_model);
}

TEST(GgufCrafted, BadDimensionsAreRejected) {
  std::vector<uint8_t> data(64);
  EXPECT_EQ(parse_status(GgufBuilder().add_tensor("t", 0, {}, data.data(), 0).build()), Status::bad_model);  // 0 dims
  EXPECT_EQ(parse_status(GgufBuilder().add_tensor("t", 0, {1, 1, 1, 1, 1}, data.data(), 4).build()), Status::bad_model);
  EXPECT_EQ(parse_status(GgufBuilder().add_tensor("t", 0, {1, 1, 1, 1, 1, 1, 1, 1}, data.data(), 4).build()), Status::bad_model);
  EXPECT_EQ(parse_status(GgufBuilder().add_tensor("t", 0, {4, 0}, data.data(), 16).build()), Status::bad_model);  // a zero dim
  EXPECT_EQ(parse_status(GgufBuilder().add_tensor("t", 0, {1, 1, 1, 1}, data.data(), 4).build()), Status::ok);
  // n_dims = 2^32 - 1 in the raw stream (the builder writes size(); patch it)
  size_t ds = 0;
  std::vector<uint8_t> b = GgufBuilder().add_tensor("t", 0, {4}, data.data(), 16).build(&ds);
  const size_t ndims_at = 24 + 8 + 1;  // header, name length, name
  ASSERT_EQ(b[ndims_at], 1);
  for (uint32_t nd : {0u, 5u, 0xffffffffu}) {
    std::vector<uint8_t> c = b;
    std::memcpy(&c[ndims_at], &nd, 4);
    EXPECT_EQ(parse_status(c), Status::bad_model) << nd;
  }
}

TEST(GgufCrafted, OverflowingElementCountsAreRejected) {
  const uint64_t big = uint64_t{1} << 40;
  EXPECT_EQ(parse_status(GgufBuilder().add_tensor_info("t", 0, {big, big}, 0).build()), Status::bad_model);
  EXPECT_EQ(parse_status(GgufBuilder().add_tensor_info("t", 0, {big, big, big, big}, 0).build()), Status::bad_model);
  EXPECT_EQ(parse_status(GgufBuilder().add_tensor_info("t", 0, {~uint64_t{0}}, 0).build()), Status::bad_model);
  EXPECT_EQ(parse_status(GgufBuilder().add_tensor_info("t", 0, {uint64_t{1} << 62}, 0).build()), Status::bad_model);
  // element count fits, byte count (x4) does not: 2^31 * 2^31 elements of F32
  EXPECT_EQ(parse_status(GgufBuilder().add_tensor_info("t", 0, {uint64_t{1} << 31, uint64_t{1} << 31}, 0).build()), Status::bad_model);
  // fits in 64 bits but not in the file
  EXPECT_EQ(parse_status(GgufBuilder().add_tensor_info("t", 0, {1024, 1024}, 0).build()), Status::bad_model);
}

TEST(GgufCrafted, MisalignedAndOutOfFileOffsetsAreRejected) {
  std::vector<float> v(8, 1.0f);
  GgufBuilder ok;
  ok.add_tensor_f32("a", {8}, v);
  EXPECT_EQ(parse_status(ok.build()), Status::ok);
  for (uint64_t off : {uint64_t{4}, uint64_t{1}, uint64_t{31}, uint64_t{33}}) {
    std::vector<uint8_t> b = GgufBuilder().add_tensor_f32("a", {8}, v).add_tensor_info("b", 0, {8}, off).build();
    EXPECT_EQ(parse_status(b), Status::bad_model) << "misaligned " << off;
  }
  for (uint64_t off : {uint64_t{32}, uint64_t{1} << 20, uint64_t{1} << 62, ~uint64_t{0} - 31, ~uint64_t{0} & ~uint64_t{31}}) {
    std::vector<uint8_t> b = GgufBuilder().add_tensor_f32("a", {8}, v).add_tensor_info("b", 0, {8}, off).build();
    EXPECT_EQ(parse_status(b), Status::bad_model) << "out of file " << off;
  }
  // In the file, but the data runs past its end by one element.
  EXPECT_EQ(parse_status(GgufBuilder().add_tensor_f32("a", {8}, v).add_tensor_info("b", 0, {9}, 0).build()), Status::bad_model);
  // The declared alignment is honoured (64) and a bad one rejected.
  EXPECT_EQ(parse_status(GgufBuilder().set_alignment(64).add_u32("general.alignment", 64).add_tensor_f32("a", {8}, v)
                             .add_tensor_info("b", 0, {8}, 32).build()), Status::bad_model);
  EXPECT_EQ(parse_status(GgufBuilder().set_alignment(64).add_u32("general.alignment", 64).add_tensor_f32("a", {8}, v)
                             .add_tensor_info("b", 0, {8}, 0).build()), Status::ok);
  for (uint32_t a : {0u, 1u, 2u, 3u, 4u, 48u, 1u << 21}) {
    EXPECT_EQ(parse_status(GgufBuilder().add_u32("general.alignment", a).add_tensor_f32("a", {8}, v).build()), Status::bad_model) << a;
  }
  EXPECT_EQ(parse_status(GgufBuilder().add_string("general.alignment", "32").build()), Status::bad_model);
}

TEST(GgufCrafted, DuplicateKeysAndTensorsAreRejected) {
  std::string msg;
  EXPECT_EQ(parse_status(GgufBuilder().add_u32("k", 1).add_u32("k", 2).build(), &msg), Status::bad_model);
  EXPECT_NE(msg.find("duplicate"), std::string::npos) << msg;
  EXPECT_EQ(parse_status(GgufBuilder().add_u32("k", 1).add_string("k", "x").build()), Status::bad_model);
  std::vector<float> v(4, 0.0f);
  EXPECT_EQ(parse_status(GgufBuilder().add_tensor_f32("t", {4}, v).add_tensor_f32("t", {4}, v).build(), &msg), Status::bad_model);
  EXPECT_NE(msg.find("duplicate"), std::string::npos) << msg;
}

// ================================================================================================================
// Metadata round trip
// ================================================================================================================

TEST(GgufMetadata, EveryValueTypeAndArrayRoundTrips) {
  for (uint32_t version : {2u, 3u}) {
    SCOPED_TRACE("version " + std::to_string(version));
    GgufBuilder b;
    b.set_version(version)
        .add_u8("u8", 250).add_i8("i8", -120).add_u16("u16", 65000).add_i16("i16", -32000)
        .add_u32("u32", 4000000000u).add_i32("i32", -2000000000).add_u64("u64", 0xfedcba9876543210ull)
        .add_i64("i64", std::numeric_limits<int64_t>::min()).add_f32("f32", 3.25f).add_f64("f64", -1e300)
        .add_bool("t", true).add_bool("f", false).add_string("s", std::string("h\0llo", 5)).add_string("empty", "")
        .add_string_array("sa", {"a", "", "\xE2\x96\x81x"}).add_string_array("sa0", {})
        .add_f32_array("fa", {1.5f, -2.0f}).add_i32_array("ia", {-1, 7}).add_u32_array("ua", {0xffffffffu})
        .add_i64_array("la", {std::numeric_limits<int64_t>::max(), -3});
    // the numeric array kinds the builder has no shortcut for
    auto arr = [&](const std::string &k, uint32_t et, const std::vector<uint8_t> &elems, uint64_t n) {
      infokv_test::ByteWriter w;
      w.le<uint32_t>(et);
      w.le<uint64_t>(n);
      w.raw(elems.data(), elems.size());
      b.add_raw(k, 9, w.bytes);
    };
    arr("u8a", 0, {1, 255}, 2);
    arr("i8a", 1, {0x80}, 1);
    arr("u16a", 2, {0x34, 0x12}, 1);
    arr("i16a", 3, {0xff, 0xff}, 1);
    arr("ba", 7, {1, 0, 1}, 3);
    arr("f64a", 12, {0, 0, 0, 0, 0, 0, 0xf0, 0x3f}, 1);
    arr("u64a", 10, {1, 0, 0, 0, 0, 0, 0, 0x80}, 1);
    std::vector<uint8_t> bytes = b.build();
    GgufFile f(bytes.data(), bytes.size());

    EXPECT_EQ(f.metadata().size(), 27u);
    EXPECT_EQ(f.find("u8")->type, GgufValueType::UINT8);
    EXPECT_EQ(f.get_int("u8", 0), 250);
    EXPECT_EQ(f.get_int("i8", 0), -120);
    EXPECT_EQ(f.get_int("u16", 0), 65000);
    EXPECT_EQ(f.get_int("i16", 0), -32000);
    EXPECT_EQ(f.get_int("u32", 0), 4000000000ll);
    EXPECT_EQ(f.get_int("i32", 0), -2000000000);
    EXPECT_EQ(f.find("u64")->u, 0xfedcba9876543210ull);
    EXPECT_EQ(f.find("u64")->type, GgufValueType::UINT64);
    EXPECT_EQ(f.get_int("i64", 0), std::numeric_limits<int64_t>::min());
    EXPECT_EQ(f.get_float("f32", 0), 3.25);
    EXPECT_EQ(f.get_float("f64", 0), -1e300);
    EXPECT_EQ(f.get_float("i32", 0), -2000000000.0);  // integers widen to float
    EXPECT_TRUE(f.get_bool("t", false));
    EXPECT_FALSE(f.get_bool("f", true));
    EXPECT_EQ(f.get_string("s", ""), std::string("h\0llo", 5));
    EXPECT_EQ(f.get_string("empty", "x"), "");
    EXPECT_EQ(f.get_string("missing", "fb"), "fb");
    EXPECT_EQ(f.get_int("missing", -9), -9);

    const infokv::GgufValue *sa = f.get_array("sa", GgufValueType::STRING);
    ASSERT_NE(sa, nullptr);
    ASSERT_EQ(sa->strings.size(), 3u);
    EXPECT_EQ(sa->strings[0], "a");
    EXPECT_EQ(sa->strings[1], "");
    EXPECT_EQ(sa->strings[2], "\xE2\x96\x81x");
    EXPECT_EQ(f.get_array("sa0", GgufValueType::STRING)->count, 0u);
    auto elem = [&](const char *k, GgufValueType t, size_t i, size_t size) {
      const infokv::GgufValue *v = f.get_array(k, t);
      EXPECT_NE(v, nullptr) << k;
      uint64_t u = 0;
      if (v != nullptr) std::memcpy(&u, v->raw + i * size, size);
      return u;
    };
    float fl;
    uint32_t fb = static_cast<uint32_t>(elem("fa", GgufValueType::FLOAT32, 1, 4));
    std::memcpy(&fl, &fb, 4);
    EXPECT_EQ(fl, -2.0f);
    EXPECT_EQ(static_cast<int32_t>(elem("ia", GgufValueType::INT32, 0, 4)), -1);
    EXPECT_EQ(elem("ua", GgufValueType::UINT32, 0, 4), 0xffffffffu);
    EXPECT_EQ(static_cast<int64_t>(elem("la", GgufValueType::INT64, 0, 8)), std::numeric_limits<int64_t>::max());
    EXPECT_EQ(static_cast<int64_t>(elem("la", GgufValueType::INT64, 1, 8)), -3);
    EXPECT_EQ(elem("u8a", GgufValueType::UINT8, 1, 1), 255u);
    EXPECT_EQ(static_cast<int8_t>(elem("i8a", GgufValueType::INT8, 0, 1)), -128);
    EXPECT_EQ(elem("u16a", GgufValueType::UINT16, 0, 2), 0x1234u);
    EXPECT_EQ(static_cast<int16_t>(elem("i16a", GgufValueType::INT16, 0, 2)), -1);
    EXPECT_EQ(elem("ba", GgufValueType::BOOL, 2, 1), 1u);
    EXPECT_EQ(elem("f64a", GgufValueType::FLOAT64, 0, 8), 0x3ff0000000000000ull);
    EXPECT_EQ(elem("u64a", GgufValueType::UINT64, 0, 8), 0x8000000000000001ull);
    EXPECT_EQ(f.get_array("missing", GgufValueType::INT32), nullptr);

    // Wrong-type access is a bad_model error naming the key, never a silent reinterpretation.
    std::string msg;
    EXPECT_EQ(status_of([&] { f.get_string("u8", ""); }, &msg), Status::bad_model);
    EXPECT_NE(msg.find("'u8'"), std::string::npos) << msg;
    EXPECT_EQ(status_of([&] { f.get_int("s", 0); }), Status::bad_model);
    EXPECT_EQ(status_of([&] { f.get_float("sa", 0); }), Status::bad_model);
    EXPECT_EQ(status_of([&] { f.get_bool("u8", false); }), Status::bad_model);
    EXPECT_EQ(status_of([&] { f.get_array("ia", GgufValueType::UINT32); }), Status::bad_model);
    EXPECT_EQ(status_of([&] { f.get_array("u8", GgufValueType::UINT8); }), Status::bad_model);
    EXPECT_EQ(status_of([&] { f.get_string_req("nope"); }, &msg), Status::bad_model);
    EXPECT_NE(msg.find("nope"), std::string::npos);
    EXPECT_EQ(status_of([&] { f.get_int_req("nope"); }), Status::bad_model);
  }
}

TEST(GgufMetadata, RewritingTheRealFileIsLossless) {
  REQUIRE_STORIES_BYTES();
  const auto &b = infokv_test::stories_bytes();
  GgufFile f(b.data(), b.size());
  std::vector<uint8_t> copy = infokv_test::rewrite_gguf(f).build();
  GgufFile g(copy.data(), copy.size());
  ASSERT_EQ(g.metadata().size(), f.metadata().size());
  ASSERT_EQ(g.tensors().size(), f.tensors().size());
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const auto &a = f.tensors()[i], &c = g.tensors()[i];
    EXPECT_EQ(a.name, c.name);
    EXPECT_EQ(a.n_bytes, c.n_bytes);
    EXPECT_EQ(0, std::memcmp(a.data, c.data, static_cast<size_t>(a.n_bytes))) << a.name;
  }
  EXPECT_EQ(infokv::Tokenizer::from_gguf(g).fingerprint(), infokv::Tokenizer::from_gguf(f).fingerprint());
}

// ================================================================================================================
// Semantic errors in Model::load
// ================================================================================================================

TEST(ModelLoad, TinySyntheticModelLoadsAndDecodes) {
  std::vector<uint8_t> bytes = tiny_llama().build();
  TempFile f(bytes);
  auto m = Model::load(f.path());
  EXPECT_EQ(m->hparams().n_vocab, 8);
  EXPECT_EQ(m->hparams().n_ff, 256);
  EXPECT_TRUE(m->tied_output());
  auto lg = infokv_test::logits_per_position(m, {1, 3, 4});
  ASSERT_EQ(lg.size(), 3u);
  for (float x : lg[2]) EXPECT_TRUE(std::isfinite(x));
}

TEST(ModelLoad, EveryMissingTensorIsNamed) {
  const std::vector<uint8_t> base = tiny_llama().build();
  GgufFile f(base.data(), base.size());
  for (const auto &t : f.tensors()) {
    const std::string victim = t.name;
    std::string msg;
    Status s = load_status(tiny_edited([&](TensorEdit &e) { return e.name != victim; }), &msg);
    EXPECT_EQ(s, Status::bad_model) << victim;
    EXPECT_NE(msg.find("missing tensor '" + victim + "'"), std::string::npos) << msg;
  }
}

TEST(ModelLoad, WrongShapesAreRejected) {
  struct Case { std::string name; std::vector<uint64_t> ne; };
  const std::vector<Case> cases = {
      {"blk.0.attn_q.weight", {8, 7}},        {"blk.0.attn_k.weight", {8, 8}},   {"blk.0.attn_v.weight", {4, 8}},
      {"blk.0.attn_output.weight", {8, 4}},   {"blk.0.ffn_gate.weight", {8, 255}}, {"blk.0.ffn_down.weight", {8, 256}},
      {"blk.0.ffn_up.weight", {8, 256, 1}},   {"blk.0.attn_norm.weight", {7}},   {"output_norm.weight", {8, 2}},
      {"token_embd.weight", {7, 8}},          {"token_embd.weight", {8, 9}},     {"token_embd.weight", {64}},
  };
  for (const Case &c : cases) {
    std::string msg;
    Status s = load_status(tiny_edited([&](TensorEdit &e) {
      if (e.name == c.name) {
        e.ne = c.ne;
        uint64_t n = 1;
        for (uint64_t d : c.ne) n *= d;
        e.data.assign(static_cast<size_t>(n) * 4, 0);
      }
      return true;
    }), &msg);
    EXPECT_EQ(s, Status::bad_model) << c.name;
    EXPECT_NE(msg.find(c.name), std::string::npos) << msg;
  }
  // A separate output matrix of the wrong shape.
  std::string msg;
  EXPECT_EQ(load_status(tiny_edited(nullptr, nullptr, [](GgufBuilder &b) {
              b.add_tensor_f32("output.weight", {8, 7}, std::vector<float>(56, 0.0f));
            }), &msg), Status::bad_model);
  EXPECT_NE(msg.find("output.weight"), std::string::npos) << msg;
}

TEST(ModelLoad, QuantisedTensorGivesTheExactUnsupportedMessage) {
  std::string msg;
  Status s = load_status(tiny_edited([](TensorEdit &e) {
    if (e.name == "blk.0.ffn_down.weight") {
      e.type = static_cast<uint32_t>(infokv::GgmlType::Q2_K);  // [256, 8]: 8 blocks of 84 bytes
      e.data.assign(8 * 84, 0);
    }
    return true;
  }), &msg);
  EXPECT_EQ(s, Status::unsupported);
  EXPECT_EQ(msg, "unsupported tensor type Q2_K in blk.0.ffn_down.weight");
  // A non-quantised type the decoder has no kernel for gets the same style.
  s = load_status(tiny_edited([](TensorEdit &e) {
    if (e.name == "blk.0.attn_q.weight") {
      e.type = static_cast<uint32_t>(infokv::GgmlType::I32);
    }
    return true;
  }), &msg);
  EXPECT_EQ(s, Status::unsupported);
  EXPECT_EQ(msg, "unsupported tensor type I32 in blk.0.attn_q.weight");
}

TEST(ModelLoad, BadHyperParametersAndTokenizerAreRejected) {
  struct Case { const char *what; std::function<void(GgufBuilder &)> add; const char *drop; Status want; };
  const std::vector<Case> cases = {
      {"architecture", [](GgufBuilder &b) { b.add_string("general.architecture", "gpt2"); }, "general.architecture", Status::unsupported},
      {"no architecture", nullptr, "general.architecture", Status::bad_model},
      {"no block count", nullptr, "llama.block_count", Status::bad_model},
      {"zero heads", [](GgufBuilder &b) { b.add_u32("llama.attention.head_count", 0); }, "llama.attention.head_count", Status::bad_model},
      {"huge embd", [](GgufBuilder &b) { b.add_u64("llama.embedding_length", kHuge); }, "llama.embedding_length", Status::bad_model},
      {"string layers", [](GgufBuilder &b) { b.add_string("llama.block_count", "1"); }, "llama.block_count", Status::bad_model},
      {"kv heads", [](GgufBuilder &b) { b.add_u32("llama.attention.head_count_kv", 3); }, "llama.attention.head_count_kv", Status::bad_model},
      {"eps", [](GgufBuilder &b) { b.add_f32("llama.attention.layer_norm_rms_epsilon", -1.0f); }, "llama.attention.layer_norm_rms_epsilon", Status::bad_model},
      {"theta nan", [](GgufBuilder &b) { b.add_f32("llama.rope.freq_base", std::nanf("")); }, "llama.rope.freq_base", Status::bad_model},
      {"tokenizer model", [](GgufBuilder &b) { b.add_string("tokenizer.ggml.model", "bert"); }, "tokenizer.ggml.model", Status::unsupported},
      {"no tokens", nullptr, "tokenizer.ggml.tokens", Status::bad_model},
      {"token count", [](GgufBuilder &b) { b.add_string_array("tokenizer.ggml.tokens", {"a", "b"}); }, "tokenizer.ggml.tokens", Status::bad_model},
      {"scores count", [](GgufBuilder &b) { b.add_f32_array("tokenizer.ggml.scores", {0}); }, "tokenizer.ggml.scores", Status::bad_model},
      {"bos range", [](GgufBuilder &b) { b.add_u32("tokenizer.ggml.bos_token_id", 8); }, "tokenizer.ggml.bos_token_id", Status::bad_model},
      {"rope scaling", [](GgufBuilder &b) { b.add_string("llama.rope.scaling.type", "yarn"); }, "", Status::unsupported},
  };
  for (const Case &c : cases) {
    std::string msg;
    const std::string drop = c.drop;
    Status s = load_status(tiny_edited(nullptr, [&](const std::string &k) { return k != drop; }, c.add), &msg);
    EXPECT_EQ(s, c.want) << c.what << ": " << msg;
    EXPECT_FALSE(msg.empty()) << c.what;
  }
}

// ================================================================================================================
// F16 and BF16 weights
// ================================================================================================================

namespace {

struct Deviation {
  double max_abs = 0;
  bool same_argmax = true;
};

Deviation compare_converted(uint32_t ggml_type) {
  const auto &b = infokv_test::stories_bytes();
  GgufFile f(b.data(), b.size());
  std::vector<uint8_t> conv = infokv_test::rewrite_gguf(f, infokv_test::convert_f32_to(ggml_type)).build();
  TempFile tf(conv);
  auto m32 = Model::load(infokv_test::stories_path());
  auto mh = Model::load(tf.path());
  for (const auto &t : mh->gguf().tensors()) EXPECT_EQ(t.type, ggml_type) << t.name;
  EXPECT_EQ(mh->weight_bytes() * 2, m32->weight_bytes());
  // BOS + "Once upon a time" + the start of the reference continuation: 12 positions.
  const std::vector<int32_t> toks = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315};
  auto a = infokv_test::logits_per_position(m32, toks);
  auto c = infokv_test::logits_per_position(mh, toks);
  Deviation d;
  for (size_t i = 0; i < toks.size(); ++i) {
    for (size_t v = 0; v < a[i].size(); ++v) d.max_abs = std::max(d.max_abs, std::fabs(static_cast<double>(a[i][v]) - c[i][v]));
    auto am = std::max_element(a[i].begin(), a[i].end()) - a[i].begin();
    auto cm = std::max_element(c[i].begin(), c[i].end()) - c[i].begin();
    if (am != cm) d.same_argmax = false;
  }
  return d;
}

}  // namespace

// Measured on this model (logits range about -7..+20 over 12 positions, all 48 tensors converted, norms and the
// separate output matrix included): F16 weights moved logits by at most 0.017 and BF16 (8-bit mantissa, 8x
// coarser than F16's 11) by 0.093. The bounds are 3x those figures (rounding is deterministic, so the figures do
// not vary between runs; the margin is for other kernels' summation orders), and the greedy choice must not
// change at any position.
TEST(ModelLoad, F16WeightsStayCloseToF32) {
  REQUIRE_STORIES_BYTES();
  Deviation d = compare_converted(static_cast<uint32_t>(infokv::GgmlType::F16));
  RecordProperty("max_abs_logit_diff", std::to_string(d.max_abs));
  std::printf("F16 weights: max |logit diff| = %.3g\n", d.max_abs);
  EXPECT_LT(d.max_abs, 5e-2);
  EXPECT_GT(d.max_abs, 0.0);  // the conversion really happened
  EXPECT_TRUE(d.same_argmax);
}

TEST(ModelLoad, BF16WeightsStayCloseToF32) {
  REQUIRE_STORIES_BYTES();
  Deviation d = compare_converted(static_cast<uint32_t>(infokv::GgmlType::BF16));
  RecordProperty("max_abs_logit_diff", std::to_string(d.max_abs));
  std::printf("BF16 weights: max |logit diff| = %.3g\n", d.max_abs);
  EXPECT_LT(d.max_abs, 0.3);
  EXPECT_GT(d.max_abs, 0.0);
  EXPECT_TRUE(d.same_argmax);
}

// The test's own converters agree with the library's decoders: converting and decoding moves a value by at most half
// a unit in the last place of the format (checked over normal, subnormal and tie cases).
TEST(ModelLoad, TestConvertersRoundToNearest) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> u(-8.0f, 8.0f);
  std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 1e-7f, 3.0f / 1024.0f,
                           1.0f + 1.0f / 2048.0f, 1.0f + 3.0f / 2048.0f, 1.0f + 1.0f / 256.0f, 1.0f + 3.0f / 256.0f};
  for (int i = 0; i < 20000; ++i) xs.push_back(u(rng) * std::pow(2.0f, static_cast<float>(static_cast<int>(rng() % 30)) - 20.0f));
  for (float x : xs) {
    const uint16_t h = infokv_test::test_float_to_f16(x);
    EXPECT_EQ(h, infokv::float_to_fp16(x)) << x;
    const float back = infokv::fp16_to_float(h);
    const double ulp = std::fabs(x) < 6.1035156e-05 ? 5.9604645e-08 : std::ldexp(1.0, std::ilogb(x) - 10);
    EXPECT_LE(std::fabs(static_cast<double>(back) - x), ulp / 2) << x;
    const uint16_t bh = infokv_test::test_float_to_bf16(x);
    EXPECT_EQ(bh, infokv::float_to_bf16(x)) << x;
    if (x != 0.0f) {
      EXPECT_LE(std::fabs(static_cast<double>(infokv::bf16_to_float(bh)) - x), std::ldexp(1.0, std::ilogb(x) - 8)) << x;
    }
  }
}

// The GGUF spec requires general.alignment to be a multiple of 8: 1, 2 and 4 would let weights start at odd
// addresses, where the kernels' float / half loads are undefined behaviour (UBSan reported exactly that before the
// reader refused them). Alignment 8 with a 1-byte tensor first puts every weight at a multiple of 8 but not of 32:
// the model must compute exactly as the 32-aligned copy.
TEST(ModelLoad, AlignmentBelow8IsRefusedAnd8ComputesLike32) {
  for (uint32_t type : {0u, 1u, 30u}) {  // F32, F16, BF16 weights
    SCOPED_TRACE("weight type " + std::to_string(type));
    const std::vector<uint8_t> base = tiny_llama().build();
    GgufFile f(base.data(), base.size());
    auto conv = type == 0 ? infokv_test::TensorEditor(nullptr) : infokv_test::convert_f32_to(type);
    std::vector<uint8_t> aligned = infokv_test::rewrite_gguf(f, conv).build();
    GgufFile fa(aligned.data(), aligned.size());
    auto packed_with = [&](uint32_t alignment) {
      GgufBuilder b;
      b.set_alignment(alignment).add_u32("general.alignment", alignment);
      const uint8_t one = 7;
      b.add_tensor("pad.byte", static_cast<uint32_t>(infokv::GgmlType::I8), {1}, &one, 1);
      for (const auto &kv : fa.metadata())
        b.add_raw(kv.first, static_cast<uint32_t>(kv.second.type), infokv_test::gguf_value_payload(kv.second));
      for (const auto &t : fa.tensors())
        b.add_tensor(t.name, t.type, std::vector<uint64_t>(t.ne, t.ne + t.n_dims), t.data, static_cast<size_t>(t.n_bytes));
      return b.build();
    };
    for (uint32_t a : {1u, 2u, 4u}) {
      std::string msg;
      EXPECT_EQ(load_status(packed_with(a), &msg), Status::bad_model) << a;
      EXPECT_NE(msg.find("general.alignment"), std::string::npos) << msg;
    }
    std::vector<uint8_t> packed = packed_with(8);
    GgufFile fp(packed.data(), packed.size());
    ASSERT_EQ(fp.alignment(), 8u);
    TempFile ta(aligned), tp(packed);
    auto ma = Model::load(ta.path());
    auto mp = Model::load(tp.path());
    EXPECT_EQ(mp->gguf().find_tensor("token_embd.weight")->offset, 8u);  // not a multiple of 32
    EXPECT_EQ(reinterpret_cast<uintptr_t>(mp->gguf().find_tensor("token_embd.weight")->data) % 8, 0u);
    const std::vector<int32_t> toks = {1, 3, 4, 5, 7};
    EXPECT_EQ(infokv_test::logits_per_position(ma, toks), infokv_test::logits_per_position(mp, toks));
  }
}
