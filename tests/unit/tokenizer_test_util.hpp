// Shared by the tokenizer tests: load a tokenizer from an in-memory GGUF, expect a load to fail with a status and
// message, and the SmolLM2 GGUF (a real BPE vocabulary) when the machine has it.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.hpp"
#include "gguf_builder.hpp"
#include "test_paths.hpp"
#include "tokenizer/tokenizer.hpp"
#include "util/error.hpp"

namespace infokv_test {

inline infokv::Tokenizer load_tokenizer(const GgufBuilder &b) {
  std::vector<uint8_t> bytes = b.build();
  infokv::GgufFile f(bytes.data(), bytes.size());
  return infokv::Tokenizer::from_gguf(f);
}

inline void expect_tokenizer_status(const GgufBuilder &b, infokv::Status status, const std::string &needle) {
  try {
    load_tokenizer(b);
    ADD_FAILURE() << "loaded without error; expected " << needle;
  } catch (const infokv::Error &e) {
    EXPECT_EQ(e.status(), status) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// Opened once per test binary; null where the file is missing (REQUIRE_SMOLLM2 then fails the test, loudly).
inline const infokv::GgufFile *smollm2_file() {
  static std::unique_ptr<infokv::GgufFile> f;
  if (!f && std::filesystem::exists(smollm2_path())) f = std::make_unique<infokv::GgufFile>(smollm2_path());
  return f.get();
}

}  // namespace infokv_test

#define REQUIRE_SMOLLM2(file)                                                                                        \
  const infokv::GgufFile *file = infokv_test::smollm2_file();                                                        \
  ASSERT_NE(file, nullptr) << "SmolLM2 GGUF " << infokv_test::smollm2_path()                                          \
                           << " is missing: run packaging/fetch_models.sh (or set INFOKV_SMOLLM2)"
