// The strict JSON reader and the safetensors reader: valid files read back exactly; hostile headers (bad lengths,
// offsets, sizes, overlaps, dtypes, nesting, encodings) and random corruptions are rejected with a status, never a
// crash. The safetensors writer's files read back exactly.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "kernels/fp16.hpp"
#include "model/safetensors.hpp"
#include "model/safetensors_writer.hpp"
#include "util/error.hpp"
#include "util/file_io.hpp"
#include "util/json_reader.hpp"

using infokv::Error;
using infokv::JsonValue;
using infokv::SafetensorsFile;
using infokv::Status;

namespace {

JsonValue parse(const std::string &s) { return JsonValue::parse(s, static_cast<int32_t>(Status::bad_config), "test"); }

void expect_json_error(const std::string &s, const std::string &needle) {
  try {
    parse(s);
    ADD_FAILURE() << "parsed: " << s;
  } catch (const Error &e) {
    EXPECT_EQ(e.status(), Status::bad_config);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

std::vector<uint8_t> st_file(const std::string &header, const std::vector<uint8_t> &data, int64_t len_override = -1) {
  std::vector<uint8_t> out(8);
  const uint64_t n = len_override >= 0 ? static_cast<uint64_t>(len_override) : header.size();
  for (int k = 0; k < 8; ++k) out[static_cast<size_t>(k)] = static_cast<uint8_t>(n >> (8 * k));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void expect_st_error(const std::vector<uint8_t> &b, Status st, const std::string &needle) {
  try {
    SafetensorsFile f(b.data(), b.size());
    ADD_FAILURE() << "accepted a bad file; expected " << needle;
  } catch (const Error &e) {
    EXPECT_EQ(e.status(), st) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

const std::string kGood =
    R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
    R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]},"e":{"dtype":"F16","shape":[0,4],"data_offsets":[22,22]}})";

std::vector<uint8_t> good_data() {
  std::vector<uint8_t> d(22);
  const float a[4] = {1.0f, -2.0f, 0.5f, 3.25f};
  std::memcpy(d.data(), a, 16);
  const uint16_t b[3] = {0x3F80, 0x4000, 0xC040};  // 1, 2, -3
  std::memcpy(d.data() + 16, b, 6);
  return d;
}

}  // namespace

TEST(JsonReader, ParsesValuesEscapesAndKeepsMemberOrder) {
  JsonValue v = parse(R"( {"b": [1, -2.5e1, true, false, null], "a": "x\u00e9\ud83d\ude00\n\"", "n": -0, "big": 12345678901234} )");
  ASSERT_TRUE(v.is_object());
  ASSERT_EQ(v.members().size(), 4u);
  EXPECT_EQ(v.members()[0].first, "b");
  const JsonValue *b = v.find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(b->items()[0].is_integer());
  EXPECT_EQ(b->items()[0].as_int(), 1);
  EXPECT_FALSE(b->items()[1].is_integer());
  EXPECT_DOUBLE_EQ(b->items()[1].as_number(), -25.0);
  EXPECT_TRUE(b->items()[2].as_bool());
  EXPECT_TRUE(b->items()[4].is_null());
  EXPECT_EQ(v.find("a")->as_string(), "x\xC3\xA9\xF0\x9F\x98\x80\n\"");
  EXPECT_EQ(v.find("big")->as_int(), 12345678901234);
  EXPECT_EQ(v.find("missing"), nullptr);
}

TEST(JsonReader, RejectsMalformedAndHostileInput) {
  expect_json_error("", "unexpected end");
  expect_json_error("{", "expected a string key");
  expect_json_error(R"({"a":1,})", "expected a string key");
  expect_json_error(R"({"a":1 "b":2})", "expected ',' or '}'");
  expect_json_error(R"({"a":1,"a":2})", "duplicate key");
  expect_json_error("[1,2", "expected ',' or ']'");
  expect_json_error("01", "trailing");
  expect_json_error("1e999", "out of range");
  expect_json_error("\"\\ud800\"", "surrogate");
  expect_json_error("\"\\x\"", "bad escape");
  expect_json_error("\"a\nb\"", "control character");
  expect_json_error("\"\xff\"", "invalid UTF-8");
  expect_json_error("\"\xed\xa0\x80\"", "invalid UTF-8");
  expect_json_error("\"abc", "unterminated");
  expect_json_error("[1] x", "trailing");
  expect_json_error(std::string(100, '[') + std::string(100, ']'), "nesting");
  expect_json_error("tru", "unexpected character");
}

TEST(Safetensors, ReadsTensorsAndMetadata) {
  const std::vector<uint8_t> b = st_file(kGood, good_data());
  SafetensorsFile f(b.data(), b.size());
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const infokv::StTensor *a = f.find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, infokv::StDtype::F32);
  EXPECT_EQ(a->shape, (std::vector<uint64_t>{2, 2}));
  float v[4];
  std::memcpy(v, a->data, 16);
  EXPECT_EQ(v[3], 3.25f);
  const infokv::StTensor *bt = f.find("b");
  ASSERT_NE(bt, nullptr);
  EXPECT_EQ(bt->n_bytes, 6u);
  EXPECT_EQ(bt->data, b.data() + 8 + kGood.size() + 16);
  EXPECT_EQ(f.find("e")->n_elements, 0u);
  EXPECT_EQ(f.find("nope"), nullptr);
}

TEST(Safetensors, RejectsHostileHeaders) {
  const std::vector<uint8_t> d = good_data();
  expect_st_error({1, 2, 3}, Status::bad_model, "too short");
  expect_st_error(st_file(kGood, d, int64_t{1} << 40), Status::bad_model, "100 MiB");
  expect_st_error(st_file(kGood, d, static_cast<int64_t>(kGood.size() + d.size() + 1)), Status::bad_model, "past the end");
  expect_st_error(st_file("[]", {}), Status::bad_model, "not a JSON object");
  expect_st_error(st_file("{\"a\":", {}), Status::bad_model, "header");
  expect_st_error(st_file(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", {0, 0, 0, 0}), Status::bad_model, "dtype");
  expect_st_error(st_file(R"({"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", {0}), Status::unsupported, "F8_E4M3");
  expect_st_error(st_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", {0, 0, 0, 0}), Status::bad_model, "non-negative");
  expect_st_error(st_file(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", {0, 0, 0, 0}), Status::bad_model, "non-negative");
  expect_st_error(st_file(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", {0, 0, 0, 0}),
                  Status::bad_model, "overflows");
  expect_st_error(st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", {0, 0, 0, 0}), Status::bad_model, "outside");
  expect_st_error(st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,0]}})", std::vector<uint8_t>(8)), Status::bad_model, "outside");
  expect_st_error(st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", std::vector<uint8_t>(8)), Status::bad_model, "need 8");
  expect_st_error(st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
                          std::vector<uint8_t>(8)),
                  Status::bad_model, "overlap");
  expect_st_error(st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", std::vector<uint8_t>(4)), Status::bad_model, "data_offsets");
  expect_st_error(st_file(R"({"__metadata__":{"x":1}})", {}), Status::bad_model, "__metadata__");
  expect_st_error(st_file(R"({"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})", std::vector<uint8_t>(4)),
                  Status::bad_model, "8 dimensions");
}

TEST(Safetensors, RandomCorruptionsNeverCrash) {
  const std::vector<uint8_t> good = st_file(kGood, good_data());
  std::mt19937_64 rng(99);
  int accepted = 0;
  for (int iter = 0; iter < 5000; ++iter) {
    std::vector<uint8_t> b = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) b[rng() % b.size()] = static_cast<uint8_t>(rng());
    if (rng() % 4 == 0) b.resize(rng() % b.size());
    try {
      SafetensorsFile f(b.data(), b.size());
      for (const auto &t : f.tensors()) {
        ASSERT_GE(t.data, b.data());
        ASSERT_LE(t.data + t.n_bytes, b.data() + b.size());
      }
      ++accepted;
    } catch (const Error &e) {
      EXPECT_TRUE(e.status() == Status::bad_model || e.status() == Status::unsupported) << e.what();
    }
  }
  EXPECT_GT(accepted, 0);  // flips inside tensor data leave a valid file
}

namespace {

std::string writer_tmp(const std::string &name) {
  return (std::filesystem::temp_directory_path() / ("infokv_stw_" + std::to_string(::getpid()) + "_" + name)).string();
}

}  // namespace

TEST(SafetensorsWriter, WritesWhatTheReaderReadsBackExactly) {
  infokv::SafetensorsWriter w;
  w.add_metadata("format", "pt");
  w.add_metadata("note", "quote \" and \\ backslash");
  w.add_tensor("w.\"odd\" name", infokv::StDtype::F32, {3, 2});
  w.add_tensor("h", infokv::StDtype::F16, {5});
  w.add_tensor("empty", infokv::StDtype::BF16, {0, 7});
  w.add_tensor("s", infokv::StDtype::I32, {});  // a scalar
  EXPECT_EQ(w.data_bytes(), 24u + 10u + 0u + 4u);
  EXPECT_EQ(w.header().size() % 8, 0u);
  const std::string path = writer_tmp("rt.safetensors");
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  // Element e of tensor i is i * 100 + e in the tensor's dtype.
  w.write(path, [&](size_t i, uint64_t first, uint64_t n, uint8_t *out) {
    for (uint64_t e = first; e < first + n; ++e) {
      const float v = static_cast<float>(i * 100 + e);
      if (i == 0) std::memcpy(out + 4 * (e - first), &v, 4);
      if (i == 1) { const uint16_t h = infokv::float_to_fp16(v); std::memcpy(out + 2 * (e - first), &h, 2); }
      if (i == 3) { const int32_t x = 300; std::memcpy(out, &x, 4); }
    }
  }, [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); });
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.back(), std::make_pair(w.data_bytes(), w.data_bytes()));

  SafetensorsFile f(path);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "quote \" and \\ backslash");
  ASSERT_EQ(f.tensors().size(), 4u);
  const infokv::StTensor *a = f.find("w.\"odd\" name");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (std::vector<uint64_t>{3, 2}));
  float v[6];
  std::memcpy(v, a->data, 24);
  for (int e = 0; e < 6; ++e) EXPECT_EQ(v[e], static_cast<float>(e));
  const infokv::StTensor *h = f.find("h");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->dtype, infokv::StDtype::F16);
  uint16_t hv;
  std::memcpy(&hv, h->data + 8, 2);
  EXPECT_EQ(infokv::fp16_to_float(hv), 104.0f);
  EXPECT_EQ(f.find("empty")->n_bytes, 0u);
  EXPECT_EQ(f.find("s")->shape, std::vector<uint64_t>{});
  int32_t sv;
  std::memcpy(&sv, f.find("s")->data, 4);
  EXPECT_EQ(sv, 300);
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(bytes.size(), 8 + w.header().size() + w.data_bytes());  // contiguous data, nothing after it
  EXPECT_EQ(bytes.substr(8, w.header().size()), w.header());
  std::remove(path.c_str());
}

TEST(SafetensorsWriter, RefusesBadNamesAndLeavesNoFileWhenFillThrows) {
  infokv::SafetensorsWriter w;
  w.add_tensor("a", infokv::StDtype::F32, {4});
  EXPECT_THROW(w.add_tensor("a", infokv::StDtype::F32, {1}), Error);
  EXPECT_THROW(w.add_tensor("__metadata__", infokv::StDtype::F32, {1}), Error);
  EXPECT_THROW(w.add_tensor("", infokv::StDtype::F32, {1}), Error);
  EXPECT_THROW(w.add_tensor("huge", infokv::StDtype::F32, {uint64_t{1} << 40, uint64_t{1} << 30}), Error);
  const std::string path = writer_tmp("throws.safetensors");
  EXPECT_THROW(w.write(path, [](size_t, uint64_t, uint64_t, uint8_t *) { throw Error(Status::cancelled, "stop"); }), Error);
  EXPECT_FALSE(std::filesystem::exists(path));
  const std::filesystem::path fp(path);
  for (const auto &e : std::filesystem::directory_iterator(fp.parent_path()))
    EXPECT_FALSE(infokv::AtomicFile::is_temp_of(e.path().filename().string(), fp.filename().string())) << e.path();
  try {
    w.write("/nonexistent-dir/x.safetensors", [](size_t, uint64_t, uint64_t, uint8_t *) {});
    ADD_FAILURE() << "wrote into a missing directory";
  } catch (const Error &e) {
    EXPECT_EQ(e.status(), Status::io);
  }
}
