// Shared by the tokenizer tests: load a tokenizer from an in-memory GGUF, expect a load to fail with a status and
// message, the SmolLM2 GGUF (a real BPE vocabulary) when the machine has it, and the reference-id files of
// tests/reference/make_refs.py and make_tok_refs.py (lines: hex(utf8 text) TAB ids).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.hpp"
#include "support/gguf_builder.hpp"
#include "support/paths.hpp"
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

struct RefCase {
  std::string text;
  std::vector<int32_t> ids;
};

inline std::string unhex(const std::string &h) {
  std::string out;
  for (size_t k = 0; k + 1 < h.size(); k += 2) out.push_back(static_cast<char>(std::stoi(h.substr(k, 2), nullptr, 16)));
  return out;
}

inline std::vector<RefCase> read_refs(const std::string &name) {
  std::ifstream in(test_data_dir() + "/" + name);
  std::vector<RefCase> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t tab = line.find('\t');
    RefCase c;
    c.text = unhex(line.substr(0, tab));
    std::istringstream ids(line.substr(tab + 1));
    int32_t id;
    while (ids >> id) c.ids.push_back(id);
    out.push_back(std::move(c));
  }
  return out;
}

inline std::string show(const std::vector<int32_t> &v) {
  std::string s;
  for (int32_t x : v) s += std::to_string(x) + " ";
  return s;
}

// encode(text, no BOS) of every case equals the reference ids; at most five mismatches are printed.
inline void expect_refs(const infokv::Tokenizer &tok, const std::string &file) {
  const std::vector<RefCase> cases = read_refs(file);
  ASSERT_GT(cases.size(), 300u) << "reference file " << file << " missing or short";
  int bad = 0;
  for (const RefCase &c : cases) {
    const std::vector<int32_t> got = tok.encode(c.text, false);
    if (got != c.ids && ++bad <= 5)
      ADD_FAILURE() << "text '" << c.text.substr(0, 200) << "'\n  expected " << show(c.ids) << "\n  got      " << show(got);
  }
  EXPECT_EQ(bad, 0) << file;
}

}  // namespace infokv_test

#define REQUIRE_SMOLLM2(file)                                                                                        \
  const infokv::GgufFile *file = infokv_test::smollm2_file();                                                        \
  ASSERT_NE(file, nullptr) << "SmolLM2 GGUF " << infokv_test::smollm2_path()                                          \
                           << " is missing: run packaging/fetch_models.sh (or set INFOKV_SMOLLM2)"
