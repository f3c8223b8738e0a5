// SmolLM2-135M-Instruct for the tests that need a real chat model: loaded once per test binary; a missing file fails
// the test loudly (run packaging/fetch_models.sh or set INFOKV_SMOLLM2), never skips it.
#pragma once
#include <filesystem>
#include <memory>

#include "model/model.hpp"
#include "support/paths.hpp"

namespace infokv_test {

inline std::shared_ptr<const infokv::Model> smollm2() {
  static std::shared_ptr<const infokv::Model> m;
  if (!m && std::filesystem::exists(smollm2_path())) m = infokv::Model::load(smollm2_path());
  return m;
}

}  // namespace infokv_test

#define REQUIRE_SMOLLM2(m)                                                                                           \
  auto m = infokv_test::smollm2();                                                                                   \
  ASSERT_NE(m, nullptr) << "SmolLM2 GGUF " << infokv_test::smollm2_path()                                             \
                        << " is missing: run packaging/fetch_models.sh (or set INFOKV_SMOLLM2)"
