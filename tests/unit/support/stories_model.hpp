// stories260K (the default model, from $INFOKV_MODELS_DIR), loaded once per test binary and shared by its tests.
#pragma once
#include <memory>

#include "model/model.hpp"
#include "support/paths.hpp"

namespace infokv_test {

inline std::shared_ptr<const infokv::Model> stories_model() {
  static const std::shared_ptr<const infokv::Model> m =
      infokv::Model::load(models_dir() + "/stories260K/stories260K.gguf");
  return m;
}

}  // namespace infokv_test
