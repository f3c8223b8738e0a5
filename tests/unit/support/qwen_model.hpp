// Qwen2.5-Coder-0.5B-Instruct (the shipped model with K biases) for the tests that need it: loaded once per test
// binary; a missing file fails the test loudly (run packaging/fetch_models.sh --model qwen2.5-coder-0.5b or set
// INFOKV_QWEN25_CODER), never skips it.
#pragma once
#include <filesystem>
#include <memory>

#include "model/model.hpp"
#include "support/paths.hpp"

namespace infokv_test {

inline std::shared_ptr<const infokv::Model> qwen25_coder() {
  static std::shared_ptr<const infokv::Model> m;
  if (!m && std::filesystem::exists(qwen25_coder_path())) m = infokv::Model::load(qwen25_coder_path());
  return m;
}

}  // namespace infokv_test

#define REQUIRE_QWEN(m)                                                                                              \
  auto m = infokv_test::qwen25_coder();                                                                              \
  ASSERT_NE(m, nullptr) << "Qwen2.5-Coder GGUF " << infokv_test::qwen25_coder_path()                                \
                        << " is missing: run packaging/fetch_models.sh --model qwen2.5-coder-0.5b (or set INFOKV_QWEN25_CODER)"
