// Configs: JSON and binary readers (strict, naming the field at fault), writers, round trips, and the C ABI.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "compress/policy_table.hpp"
#include "config/config.hpp"
#include "support/config_samples.hpp"
#include "infokv/infokv.h"
#include "util/error.hpp"

using namespace infokv;

namespace {

Status json_status(const std::string &text, std::string *msg = nullptr) {
  try {
    config_from_json(text);
  } catch (const Error &e) {
    if (msg != nullptr) *msg = e.what();
    return e.status();
  }
  return Status::ok;
}

TEST(Config, EmptyJsonGivesDefaults) {
  const Config c = config_from_json("{}");
  EXPECT_EQ(c.session.device, "auto");
  EXPECT_EQ(c.session.device, SessionOptions{}.device);  // one default for configs, sessions and C options
  EXPECT_EQ(c.session.block_size, 16);
  EXPECT_EQ(c.session.kv_dtype, KvDtype::f16);
  EXPECT_EQ(c.session.compression.policy, PolicyKind::none);
  EXPECT_FLOAT_EQ(c.sampler.temperature, 0.8f);
  EXPECT_EQ(config_to_json(c).find("self_tuning"), std::string::npos);  // deprecated: never written
}

TEST(Config, QuantisedKvDtypesAreNamedAndRoundTrip) {
  for (const char *name : {"q8_0", "q4_0"}) {
    const Config c = config_from_json(std::string(R"({"kv_dtype": ")") + name + "\"}");
    EXPECT_STREQ(kv_dtype_name(c.session.kv_dtype), name);
    const std::vector<uint8_t> bin = config_to_binary(c);
    EXPECT_EQ(config_from_binary(bin.data(), bin.size()).session.kv_dtype, c.session.kv_dtype);
  }
}

TEST(Config, JsonSetsEveryGroup) {
  const Config c = config_from_json(infokv_test::kEveryGroupJson);
  EXPECT_EQ(c.model_path, "m.gguf");
  EXPECT_EQ(c.session.device, "cuda:1");
  EXPECT_EQ(c.session.n_threads, 3);
  EXPECT_EQ(c.session.kv_dtype, KvDtype::bf16);
  EXPECT_EQ(c.session.block_size, 32);
  EXPECT_EQ(c.session.kv_pool_bytes, 1048576);
  EXPECT_EQ(c.session.ubatch, 64);
  EXPECT_EQ(c.session.compression.policy, PolicyKind::infokv);
  EXPECT_DOUBLE_EQ(c.session.compression.budget_fraction, 0.25);
  EXPECT_FLOAT_EQ(c.session.compression.alpha, 0.95f);
  EXPECT_EQ(c.session.compression.interval, 128);
  EXPECT_EQ(c.session.compression.shape, BudgetShape::pyramid);
  EXPECT_EQ(c.session.protect_prefix, 12);
  EXPECT_FLOAT_EQ(c.sampler.temperature, 0.0f);
  EXPECT_EQ(c.sampler.seed, 99u);
  EXPECT_EQ(c.sampler.top_k, 5);
}

// Issue 38: self_tuning was stored and never applied; it is deprecated. Turning it on is refused with a message
// naming what replaced it, so no config claims a mode that does not run; the block itself still reads (and is not
// kept: configs written back no longer carry it).
TEST(Config, SelfTuningEnabledIsRefusedAsDeprecated) {
  std::string msg;
  try {
    config_from_json(R"({"self_tuning": {"enabled": true}})");
  } catch (const Error &e) {
    EXPECT_EQ(e.status(), Status::bad_config);
    msg = e.what();
  }
  EXPECT_NE(msg.find("self_tuning is deprecated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"auto\""), std::string::npos) << msg;
  EXPECT_NO_THROW(config_from_json(R"({"self_tuning": {"enabled": false, "kl_bound": 0.1, "probe_tokens": 0}})"));
}

TEST(Config, UnknownFieldIsAnErrorNamingIt) {
  std::string msg;
  EXPECT_EQ(json_status(R"({"thread": 4})", &msg), Status::bad_config);
  EXPECT_NE(msg.find("thread"), std::string::npos) << msg;
  EXPECT_EQ(json_status(R"({"compression": {"polcy": "infokv"}})", &msg), Status::bad_config);
  EXPECT_NE(msg.find("polcy"), std::string::npos) << msg;
}

TEST(Config, OutOfRangeValuesAreErrorsNamingTheField) {
  const std::pair<const char *, const char *> cases[] = {
      {R"({"threads": -1})", "threads"},
      {R"({"block_size": 5000})", "block_size"},
      {R"({"compression": {"alpha": 1.5}})", "compression.alpha"},
      {R"({"compression": {"policy": "snapkv"}})", "budget"},
      {R"({"compression": {"budget_fraction": 2}})", "compression.budget_fraction"},
      {R"({"sampler": {"top_p": -0.5}})", "sampler.top_p"},
      {R"({"device": "tpu"})", "device"},
      {R"({"kv_dtype": "f8"})", "f8"},
      {R"({"kv_pool_fraction": 1.5})", "kv_pool_fraction"},
      {R"({"max_sequences": -1})", "max_sequences"},
      {R"({"max_sequences": 1048577})", "max_sequences"},
      {R"({"threads": 99999999999})", "threads"},
  };
  for (const auto &c : cases) {
    std::string msg;
    EXPECT_EQ(json_status(c.first, &msg), Status::bad_config) << c.first;
    EXPECT_NE(msg.find(c.second), std::string::npos) << c.first << " -> " << msg;
  }
}

TEST(Config, MalformedJsonIsBadConfig) {
  for (const char *t : {"", "{", "{\"threads\": }", "[1]", "{threads: 1}", "{\"threads\": 1,}", "null"})
    EXPECT_EQ(json_status(t), Status::bad_config) << t;
  EXPECT_EQ(json_status(std::string("{}\0{\"x\":1}", 11)), Status::bad_config);
}

TEST(Config, JsonAndBinaryRoundTrip) {
  const Config c = config_from_json(
      R"({"threads": 2, "kv_pool_fraction": 0.25, "max_sequences": 7, "compression": {"policy": "h2o", "budget_tokens": 64}, "sampler": {"seed": 5}})");
  const std::vector<uint8_t> bin = config_to_binary(c);
  const Config d = config_from_binary(bin.data(), bin.size());
  EXPECT_EQ(d.session.n_threads, 2);
  EXPECT_EQ(d.session.max_sequences, 7);
  EXPECT_EQ(config_from_json("{}").session.max_sequences, 4096);
  EXPECT_EQ(config_from_json(R"({"max_sequences": 0})").session.max_sequences, 4096);
  EXPECT_EQ(d.session.kv_pool_fraction, 0.25);
  EXPECT_EQ(d.session.compression.policy, PolicyKind::h2o);
  EXPECT_EQ(d.session.compression.budget_tokens, 64);
  const std::string json = config_to_json(d);
  EXPECT_NE(json.find("\"policy\": \"h2o\""), std::string::npos) << json;
  const Config e = config_from_json(json);
  EXPECT_EQ(config_to_binary(e), bin);
}

TEST(Config, BinaryReaderRefusesForeignAndDamagedBuffers) {
  const std::vector<uint8_t> bin = config_to_binary(Config{});
  std::vector<uint8_t> wrong = bin;
  wrong[4] = 'X';  // identifier
  EXPECT_THROW(config_from_binary(wrong.data(), wrong.size()), Error);
  std::mt19937 rng(3);
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> b = bin;
    for (int k = 0; k < 3; ++k) b[rng() % b.size()] = static_cast<uint8_t>(rng());
    if (rng() % 4 == 0) b.resize(rng() % b.size());
    try {
      config_from_binary(b.data(), b.size());
    } catch (const Error &e) {
      EXPECT_EQ(e.status(), Status::bad_config);
    }
  }
}

TEST(Config, StringsMustBeUtf8SoTheJsonWriterCanWriteThem) {
  Config c;
  c.model_path = "stories\xd0\xb4\xd0\x8c\x8b.gguf";  // found by fuzz_config: the binary form accepted it
  EXPECT_THROW(config_to_binary(c), Error);
  c.model_path = "stories\xd0\xb4.gguf";
  EXPECT_NO_THROW(config_to_json(c));
}

TEST(ConfigCapi, CreateParseWriteAndFree) {
  ikv_config *c = nullptr;
  const char *j = R"({"model_path": "x.gguf", "threads": 2})";
  ASSERT_EQ(ikv_config_from_json(&c, j, std::strlen(j)), IKV_OK);
  size_t n = 0;
  EXPECT_EQ(ikv_config_get_model_path(nullptr, 0, &n, c), IKV_ERR_BUFFER_TOO_SMALL);
  std::string path(n + 1, '\0');
  ASSERT_EQ(ikv_config_get_model_path(&path[0], path.size(), &n, c), IKV_OK);
  EXPECT_STREQ(path.c_str(), "x.gguf");
  ASSERT_EQ(ikv_config_to_binary(nullptr, 0, &n, c), IKV_ERR_BUFFER_TOO_SMALL);
  std::vector<uint8_t> bin(n);
  ASSERT_EQ(ikv_config_to_binary(bin.data(), bin.size(), &n, c), IKV_OK);
  ikv_config *d = nullptr;
  ASSERT_EQ(ikv_config_from_binary(&d, bin.data(), bin.size()), IKV_OK);
  ASSERT_EQ(ikv_config_to_json(nullptr, 0, &n, d), IKV_ERR_BUFFER_TOO_SMALL);
  std::string json(n + 1, '\0');
  ASSERT_EQ(ikv_config_to_json(&json[0], json.size(), &n, d), IKV_OK);
  EXPECT_NE(json.find("\"threads\": 2"), std::string::npos) << json;
  ikv_config_free(c);
  ikv_config_free(d);
  ikv_config_free(nullptr);

  ikv_config *bad = reinterpret_cast<ikv_config *>(0x1);
  const char *u = R"({"nope": 1})";
  EXPECT_EQ(ikv_config_from_json(&bad, u, std::strlen(u)), IKV_ERR_BAD_CONFIG);
  EXPECT_EQ(bad, nullptr);
  EXPECT_NE(std::string(ikv_last_error_message()).find("nope"), std::string::npos);
  EXPECT_EQ(ikv_config_to_json(nullptr, 0, &n, reinterpret_cast<ikv_config *>(&n)), IKV_ERR_BAD_HANDLE);
}

}  // namespace

// Inputs the fuzzers found (tests/data/fuzz/config/): each must be refused or read without a crash.
#include <dirent.h>
#include <fstream>
#include <sstream>
#ifndef INFOKV_TEST_DATA_DIR
#define INFOKV_TEST_DATA_DIR "tests/data"
#endif
namespace {
TEST(Config, FuzzRegressionInputsAreHandled) {
  const std::string dir = std::string(INFOKV_TEST_DATA_DIR) + "/fuzz/config";
  DIR *d = opendir(dir.c_str());
  ASSERT_NE(d, nullptr) << dir;
  int n = 0;
  while (dirent *e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(dir + "/" + e->d_name, std::ios::binary);
    std::ostringstream s;
    s << f.rdbuf();
    const std::string b = s.str();
    for (int form = 0; form < 2; ++form) {
      try {
        const Config c = form == 0 ? config_from_json(b) : config_from_binary(b.data(), b.size());
        (void)config_to_json(c);
      } catch (const Error &err) {
        EXPECT_EQ(err.status(), Status::bad_config) << e->d_name << ": " << err.what();
      }
    }
    ++n;
  }
  closedir(d);
  EXPECT_GT(n, 0);
}
}  // namespace

// ---- strict JSON (RFC 8259), one policy name, and the policy table ----
#include "compress/policy_table.hpp"
#include "infokv_fb/config_generated.h"
#include "infokv_fb/snapshot_generated.h"
#include <regex>
namespace {
namespace fbc = ::infokv::config;

void expect_refused(const std::string &text, const std::string &needle) {
  std::string msg;
  EXPECT_EQ(json_status(text, &msg), Status::bad_config) << text;
  EXPECT_NE(msg.find(needle), std::string::npos) << text << " -> " << msg;
}

TEST(ConfigStrictJson, CommentsAreRefused) {
  expect_refused("{\"threads\": 2 // two\n}", "invalid JSON");
  expect_refused("{/* two */ \"threads\": 2}", "invalid JSON");
  expect_refused("// config\n{}", "invalid JSON");
}

TEST(ConfigStrictJson, SingleQuotesAndUnquotedKeysAreRefused) {
  expect_refused("{'threads': 2}", "invalid JSON");
  expect_refused(R"({"device": 'cpu'})", "invalid JSON");
  expect_refused("{threads: 2}", "invalid JSON");
}

TEST(ConfigStrictJson, TrailingCommasAreRefused) {
  expect_refused(R"({"threads": 2,})", "invalid JSON");
  expect_refused(R"({"compression": {"policy": "h2o", "budget_tokens": 8,}})", "invalid JSON");
}

TEST(ConfigStrictJson, HexNanAndInfinityAreRefused) {
  expect_refused(R"({"block_size": 0x10})", "invalid JSON");
  expect_refused(R"({"compression": {"alpha": NaN}})", "invalid JSON");
  expect_refused(R"({"compression": {"tau": Infinity}})", "invalid JSON");
  expect_refused(R"({"compression": {"tau": -Infinity}})", "invalid JSON");
  expect_refused(R"({"compression": {"tau": nan}})", "invalid JSON");
  expect_refused(R"({"compression": {"tau": 1e999}})", "invalid JSON");
  expect_refused(R"({"threads": +2})", "invalid JSON");
  expect_refused(R"({"threads": 02})", "invalid JSON");
}

TEST(ConfigStrictJson, StringsWhereTheSchemaWantsANumberAreRefusedNamingTheField) {
  expect_refused(R"({"threads": "4"})", "threads");
  expect_refused(R"({"compression": {"interval": "64"}})", "compression.interval");
  expect_refused(R"({"compression": {"alpha": "0.5"}})", "compression.alpha");
  expect_refused(R"({"sampler": {"seed": "7"}})", "sampler.seed");
  expect_refused(R"({"threads": 2.5})", "threads");  // an int field takes a whole number
  expect_refused(R"({"threads": 2e0})", "threads");
  expect_refused(R"({"threads": null})", "threads");
  expect_refused(R"({"threads": true})", "threads");
  expect_refused(R"({"self_tuning": {"enabled": 1}})", "self_tuning.enabled");
  expect_refused(R"({"self_tuning": {"enabled": "true"}})", "self_tuning.enabled");
  expect_refused(R"({"model_path": 5})", "model_path");
  expect_refused(R"({"compression": 5})", "compression");
  expect_refused(R"({"compression": [1]})", "compression");
  expect_refused(R"({"kv_dtype": 2})", "kv_dtype");
  expect_refused(R"({"compression": {"shape": "uniform pyramid"}})", "compression.shape");
}

TEST(ConfigStrictJson, DuplicateKeysAreRefused) {
  expect_refused(R"({"threads": 1, "threads": 2})", "duplicate key 'threads'");
  expect_refused(R"({"compression": {"alpha": 0.5, "alpha": 0.6}})", "duplicate key 'alpha'");
}

TEST(ConfigStrictJson, WhatIsAcceptedStillLoads) {
  // Whitespace of every JSON kind, numbers in every JSON form a float takes, escapes, and a uint64 seed above
  // INT64_MAX.
  const Config c = config_from_json(
      "\t{\r\n\"model_path\": \"a\\u00e9\\/b.gguf\", \"compression\": {\"alpha\": 5E-1, \"tau\": 2, \"beta\": 1.5e1},"
      " \"sampler\": {\"seed\": 18446744073709551615, \"temperature\": -0.0}}\n");
  EXPECT_EQ(c.model_path, "a\xc3\xa9/b.gguf");
  EXPECT_FLOAT_EQ(c.session.compression.alpha, 0.5f);
  EXPECT_FLOAT_EQ(c.session.compression.tau, 2.0f);
  EXPECT_FLOAT_EQ(c.session.compression.beta, 15.0f);
  EXPECT_EQ(c.sampler.seed, UINT64_MAX);
}

TEST(ConfigPolicy, ANumberIsRefusedNamingTheField) {
  // 3 was snapkv in the schema's numbering but IKV_POLICY_H2O in C's: a number is ambiguous, so none is taken.
  for (const char *t : {R"({"compression": {"policy": 3, "budget_tokens": 8}})",
                        R"({"compression": {"policy": 0}})", R"({"compression": {"policy": -1}})"}) {
    std::string msg;
    EXPECT_EQ(json_status(t, &msg), Status::bad_config) << t;
    EXPECT_NE(msg.find("compression.policy"), std::string::npos) << msg;
    EXPECT_NE(msg.find("one policy name"), std::string::npos) << msg;
  }
  ikv_config *c = nullptr;
  const char *j = R"({"compression": {"policy": 3, "budget_tokens": 8}})";
  EXPECT_EQ(ikv_config_from_json(&c, j, std::strlen(j)), IKV_ERR_BAD_CONFIG);
  EXPECT_EQ(c, nullptr);
  EXPECT_NE(std::string(ikv_last_error_message()).find("compression.policy"), std::string::npos);
}

TEST(ConfigPolicy, AUnionOfNamesIsRefusedNamingTheField) {
  // The FlatBuffers parser ORs space-separated enum names: "infokv h2o" (2 | 4) ran tova (6).
  for (const char *t : {R"({"compression": {"policy": "infokv h2o", "budget_tokens": 8}})",
                        R"({"compression": {"policy": "snapkv streaming", "budget_tokens": 8}})",
                        R"({"compression": {"policy": " h2o", "budget_tokens": 8}})",
                        R"({"compression": {"policy": "H2O", "budget_tokens": 8}})",
                        R"({"compression": {"policy": "UNSPECIFIED"}})",
                        R"({"compression": {"policy": ""}})"}) {
    std::string msg;
    EXPECT_EQ(json_status(t, &msg), Status::bad_config) << t;
    EXPECT_NE(msg.find("compression.policy"), std::string::npos) << msg;
  }
}

TEST(ConfigPolicy, EveryNameOfTheTableReadsAsItsPolicyAndRoundTrips) {
  for (const PolicyInfo &p : kPolicyTable) {
    const std::string t = std::string(R"({"compression": {"policy": ")") + p.name + R"(", "budget_tokens": 8}})";
    const Config c = config_from_json(t);
    EXPECT_EQ(c.session.compression.policy, p.kind) << t;
    const std::vector<uint8_t> bin = config_to_binary(c);
    const auto *f = fbc::GetConfig(bin.data());
    EXPECT_EQ(static_cast<int>(f->compression()->policy()), p.schema_value) << p.name;
    EXPECT_EQ(config_from_binary(bin.data(), bin.size()).session.compression.policy, p.kind);
    EXPECT_NE(config_to_json(c).find(std::string("\"policy\": \"") + p.name + "\""), std::string::npos) << p.name;
  }
}

TEST(ConfigPolicy, TableColumnsMatchTheSchemasAndTheCConstants) {
  for (const PolicyInfo &p : kPolicyTable) {
    // flatc's C++ names escape C++ keywords with a trailing underscore (auto -> auto_); JSON uses the schema's name.
    std::string cpp_name = fbc::EnumNamePolicy(static_cast<fbc::Policy>(p.schema_value));
    if (cpp_name == std::string(p.name) + "_") cpp_name.pop_back();
    EXPECT_EQ(cpp_name, p.name);
    EXPECT_EQ(policy_by_name(p.name), &p);
    EXPECT_EQ(policy_by_c_value(p.c_value), &p);
    EXPECT_EQ(policy_by_schema_value(p.schema_value), &p);
    EXPECT_STREQ(policy_name(p.kind), p.name);
    EXPECT_EQ(parse_policy(p.name), p.kind);
  }
  // snapshot.fbs spells them in capitals, with the same values; both schemas end with the table's last row.
  for (const PolicyInfo &p : kPolicyTable) {
    std::string upper = p.name;
    for (char &ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    EXPECT_STREQ(infokv::snap::EnumNamePolicy(static_cast<infokv::snap::Policy>(p.schema_value)), upper.c_str());
  }
  EXPECT_EQ(static_cast<int>(fbc::Policy::MAX), kPolicyTable.back().schema_value);
  EXPECT_EQ(static_cast<int>(infokv::snap::Policy::MAX), kPolicyTable.back().schema_value);
  EXPECT_EQ(static_cast<int>(fbc::Policy::UNSPECIFIED), kPolicySchemaUnspecified);
  EXPECT_EQ(static_cast<int>(infokv::snap::Policy::UNSPECIFIED), kPolicySchemaUnspecified);
  // Every IKV_POLICY_<NAME> the C header defines is the row named <name>, with that value, and every row has one.
  std::ifstream h(std::string(INFOKV_TEST_DATA_DIR) + "/../../capi/include/infokv/session.h");
  ASSERT_TRUE(h.good()) << "capi/include/infokv/session.h not found from " << INFOKV_TEST_DATA_DIR;
  const std::string text((std::istreambuf_iterator<char>(h)), std::istreambuf_iterator<char>());
  const std::regex def(R"(#define IKV_POLICY_([A-Z0-9_]+) +([0-9]+))");
  size_t defined = 0;
  for (std::sregex_iterator it(text.begin(), text.end(), def), end; it != end; ++it, ++defined) {
    std::string lower = (*it)[1].str();
    for (char &ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    const PolicyInfo *row = policy_by_name(lower);
    ASSERT_NE(row, nullptr) << "IKV_POLICY_" << (*it)[1].str() << " has no row in kPolicyTable";
    EXPECT_EQ(row->c_value, std::stoi((*it)[2].str())) << lower;
  }
  EXPECT_EQ(defined, kPolicyTable.size());
  EXPECT_EQ(policy_by_c_value(IKV_POLICY_H2O)->kind, PolicyKind::h2o);
  EXPECT_EQ(policy_by_schema_value(static_cast<int>(fbc::Policy::h2o))->kind, PolicyKind::h2o);
  EXPECT_EQ(policy_by_c_value(IKV_POLICY_KVZIP + 1), nullptr);
  EXPECT_EQ(policy_by_schema_value(0), nullptr);  // UNSPECIFIED is "not set", not a policy
  EXPECT_EQ(policy_by_name("infokv h2o"), nullptr);
}

// A binary config with only a compression table: the raw schema policy value (any int16, valid or not) and what
// `fill` adds to the table.
template <typename F>
std::vector<uint8_t> binary_compression(int16_t policy, F &&fill) {
  flatbuffers::FlatBufferBuilder b;
  fbc::CompressionBuilder cb(b);
  cb.add_policy(static_cast<fbc::Policy>(policy));
  fill(cb);
  const auto comp = cb.Finish();
  fbc::ConfigBuilder root(b);
  root.add_compression(comp);
  fbc::FinishConfigBuffer(b, root.Finish());
  return std::vector<uint8_t>(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}

std::vector<uint8_t> binary_with_policy(int16_t policy) {
  return binary_compression(policy, [](fbc::CompressionBuilder &cb) { cb.add_budget_tokens(8); });
}

TEST(ConfigQuestion, ReadsEachNameDefaultsToLaterAndRefusesAValueOutOfRange) {
  for (const char *name : {"both", "next", "later"}) {
    const Config c = config_from_json(std::string(R"({"compression": {"policy": "snapkv", "budget_fraction": 0.5, "question": ")") +
                                      name + "\"}}");
    EXPECT_STREQ(question_name(c.session.compression.question), name);
    const std::vector<uint8_t> bin = config_to_binary(c);
    EXPECT_EQ(config_from_binary(bin.data(), bin.size()).session.compression.question, c.session.compression.question);
  }
  EXPECT_EQ(config_from_json(R"({"compression": {"policy": "snapkv", "budget_fraction": 0.5}})").session.compression.question,
            Question::later);
  const std::vector<uint8_t> bad = binary_compression(static_cast<int16_t>(fbc::Policy::h2o), [](fbc::CompressionBuilder &cb) {
    cb.add_budget_tokens(8);
    cb.add_question(static_cast<fbc::Question>(9));
  });
  try {
    config_from_binary(bad.data(), bad.size());
    ADD_FAILURE() << "question 9 was accepted";
  } catch (const Error &e) {
    EXPECT_EQ(e.status(), Status::bad_config);
    EXPECT_NE(std::string(e.what()).find("compression.question"), std::string::npos) << e.what();
  }
}

TEST(ConfigPolicy, BinaryCarriesTheSchemaValueAndRefusesOneOutOfRange) {
  const std::vector<uint8_t> h2o = binary_with_policy(static_cast<int16_t>(fbc::Policy::h2o));
  EXPECT_EQ(config_from_binary(h2o.data(), h2o.size()).session.compression.policy, PolicyKind::h2o);
  const std::vector<uint8_t> unset = binary_with_policy(0);
  EXPECT_EQ(config_from_binary(unset.data(), unset.size()).session.compression.policy, PolicyKind::none);
  for (int16_t v : {int16_t{10}, int16_t{-1}, int16_t{6 | 1}, int16_t{0x7fff}}) {
    if (v == 7) continue;  // pyramidkv
    const std::vector<uint8_t> bad = binary_with_policy(v);
    try {
      config_from_binary(bad.data(), bad.size());
      ADD_FAILURE() << "policy value " << v << " was accepted";
    } catch (const Error &e) {
      EXPECT_EQ(e.status(), Status::bad_config);
      EXPECT_NE(std::string(e.what()).find("compression.policy"), std::string::npos) << e.what();
    }
  }
}

TEST(ConfigExamples, DocumentedExamplesLoad) {
  const std::string dir = std::string(INFOKV_TEST_DATA_DIR) + "/../../packaging/examples";
  DIR *d = opendir(dir.c_str());
  ASSERT_NE(d, nullptr) << dir;
  int n = 0;
  while (dirent *e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() < 5 || name.compare(name.size() - 5, 5, ".json") != 0) continue;
    std::ifstream f(dir + "/" + name, std::ios::binary);
    std::ostringstream s;
    s << f.rdbuf();
    EXPECT_NO_THROW(config_from_json(s.str())) << name;
    ++n;
  }
  closedir(d);
  EXPECT_GE(n, 1);
}

// ---- compression.max_loss: auto's quality target ----

TEST(ConfigMaxLoss, AutoWithAQualityTargetNeedsNoBudgetAndRoundTrips) {
  const Config c = config_from_json(R"({"compression": {"policy": "auto", "max_loss": 0.05}})");
  const CompressionConfig &k = c.session.compression;
  EXPECT_EQ(k.policy, PolicyKind::auto_);
  EXPECT_DOUBLE_EQ(k.max_loss, 0.05);
  EXPECT_EQ(k.budget_tokens, 0);
  EXPECT_EQ(k.budget_fraction, 0.0);
  EXPECT_TRUE(k.quality_target());
  // binary: the field is carried and read back exactly
  const std::vector<uint8_t> bin = config_to_binary(c);
  EXPECT_EQ(fbc::GetConfig(bin.data())->compression()->max_loss(), 0.05);
  const Config d = config_from_binary(bin.data(), bin.size());
  EXPECT_EQ(d.session.compression.max_loss, 0.05);
  EXPECT_EQ(d.session.compression.policy, PolicyKind::auto_);
  // JSON: written (every field is listed), read back to the same binary
  const std::string json = config_to_json(d);
  EXPECT_NE(json.find("\"max_loss\": 0.05"), std::string::npos) << json;
  EXPECT_EQ(config_to_binary(config_from_json(json)), bin);
  // auto with a budget and a target: the target decides; the budget is kept as written
  const Config both = config_from_json(R"({"compression": {"policy": "auto", "budget_tokens": 64, "max_loss": 0.1}})");
  EXPECT_EQ(both.session.compression.budget_tokens, 64);
  EXPECT_EQ(both.session.compression.max_loss, 0.1);
}

TEST(ConfigMaxLoss, DefaultIsZeroAndWritten) {
  const Config c = config_from_json("{}");
  EXPECT_EQ(c.session.compression.max_loss, 0.0);
  EXPECT_NE(config_to_json(c).find("\"max_loss\": 0"), std::string::npos) << config_to_json(c);
  // auto with a budget and no target is the byte-budget mode
  const Config b = config_from_json(R"({"compression": {"policy": "auto", "budget_fraction": 0.25}})");
  EXPECT_FALSE(b.session.compression.quality_target());
}

TEST(ConfigMaxLoss, NegativeOrAnotherPolicysTargetIsRefusedNamingTheField) {
  expect_refused(R"({"compression": {"policy": "auto", "max_loss": -0.01}})", "compression.max_loss");
  expect_refused(R"({"compression": {"policy": "snapkv", "budget_tokens": 64, "max_loss": 0.05}})", "compression.max_loss");
  expect_refused(R"({"compression": {"max_loss": 0.05}})", "compression.max_loss");  // policy none
  expect_refused(R"({"compression": {"policy": "auto", "max_loss": "0.05"}})", "compression.max_loss");
  // auto with neither a budget nor a target
  expect_refused(R"({"compression": {"policy": "auto"}})", "compression.max_loss");
  expect_refused(R"({"compression": {"policy": "snapkv"}})", "budget");
}

std::vector<uint8_t> binary_with_max_loss(int16_t policy, double max_loss) {
  return binary_compression(policy, [&](fbc::CompressionBuilder &cb) { cb.add_max_loss(max_loss); });
}

TEST(ConfigMaxLoss, BinaryRefusesNonFiniteNegativeAndNonAutoTargets) {
  const int16_t auto_v = static_cast<int16_t>(fbc::Policy::auto_), snap_v = static_cast<int16_t>(fbc::Policy::snapkv);
  const std::vector<uint8_t> ok = binary_with_max_loss(auto_v, 0.02);
  EXPECT_EQ(config_from_binary(ok.data(), ok.size()).session.compression.max_loss, 0.02);
  const std::pair<int16_t, double> cases[] = {{auto_v, std::nan("")},
                                              {auto_v, std::numeric_limits<double>::infinity()},
                                              {auto_v, -1.0},
                                              {snap_v, 0.02}};
  for (const auto &c : cases) {
    const std::vector<uint8_t> bad = binary_with_max_loss(c.first, c.second);
    try {
      config_from_binary(bad.data(), bad.size());
      ADD_FAILURE() << "max_loss " << c.second << " with policy " << c.first << " was accepted";
    } catch (const Error &e) {
      EXPECT_EQ(e.status(), Status::bad_config);
      EXPECT_NE(std::string(e.what()).find("compression.max_loss"), std::string::npos) << e.what();
    }
  }
  // the writer refuses what the reader would
  Config c;
  c.session.compression.policy = PolicyKind::auto_;
  c.session.compression.max_loss = std::nan("");
  EXPECT_THROW(config_to_binary(c), Error);
  // and the C ABI gives the same status
  ikv_config *h = reinterpret_cast<ikv_config *>(0x1);
  const std::vector<uint8_t> neg = binary_with_max_loss(auto_v, -1.0);
  EXPECT_EQ(ikv_config_from_binary(&h, neg.data(), neg.size()), IKV_ERR_BAD_CONFIG);
  EXPECT_EQ(h, nullptr);
  EXPECT_NE(std::string(ikv_last_error_message()).find("compression.max_loss"), std::string::npos);
}

}  // namespace

// Issue 38: one rule for a config's relative model_path, in the library and the CLI: the working directory, then
// $INFOKV_MODELS_DIR. (The CLI's --config calls the same function.)
#include <cstdlib>
#include "support/paths.hpp"

TEST(Config, RelativeModelPathFollowsOneRuleInTheLibrary) {
  const std::string models = infokv_test::models_dir();
  const char *old = std::getenv("INFOKV_MODELS_DIR");
  const std::string saved = old != nullptr ? old : "";
  ::setenv("INFOKV_MODELS_DIR", models.c_str(), 1);
  EXPECT_EQ(resolve_config_model_path("stories260K/stories260K.gguf"), models + "/stories260K/stories260K.gguf");
  EXPECT_EQ(resolve_config_model_path("/abs/x.gguf"), "/abs/x.gguf");
  EXPECT_EQ(resolve_config_model_path("no/such.gguf"), "no/such.gguf");  // the loader's error names it as given
  ikv_config *c = nullptr;
  const std::string json = R"({"model_path": "stories260K/stories260K.gguf"})";
  ASSERT_EQ(ikv_config_from_json(&c, json.data(), json.size()), IKV_OK);
  ikv_model *m = nullptr;
  EXPECT_EQ(ikv_model_load_with_config(&m, c), IKV_OK) << ikv_last_error_message();
  ikv_model_free(m);
  ::unsetenv("INFOKV_MODELS_DIR");
  m = nullptr;
  EXPECT_EQ(ikv_model_load_with_config(&m, c), IKV_ERR_IO);  // not under the working directory, no models dir
  EXPECT_NE(std::string(ikv_last_error_message()).find("stories260K/stories260K.gguf"), std::string::npos);
  ikv_config_free(c);
  if (old != nullptr) ::setenv("INFOKV_MODELS_DIR", saved.c_str(), 1);
}

// compression.layer_precision: true by default (auto may hold a layer at q8_0 under a byte budget), false read,
// written and read back in both forms.
TEST(ConfigLayerPrecision, DefaultsOnReadsOffAndRoundTrips) {
  EXPECT_TRUE(config_from_json("{}").session.compression.layer_precision);
  const Config c = config_from_json(R"({"compression": {"policy": "auto", "budget_fraction": 0.25, "layer_precision": false}})");
  EXPECT_FALSE(c.session.compression.layer_precision);
  const std::vector<uint8_t> bin = config_to_binary(c);
  EXPECT_FALSE(config_from_binary(bin.data(), bin.size()).session.compression.layer_precision);
  EXPECT_NE(config_to_json(c).find("\"layer_precision\": false"), std::string::npos) << config_to_json(c);
  try {
    config_from_json(R"({"compression": {"layer_precision": 1}})");
    ADD_FAILURE() << "a number was read as a bool";
  } catch (const Error &e) {
    EXPECT_EQ(e.status(), Status::bad_config);
  }
}
