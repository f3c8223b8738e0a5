// Where the tests find the shared model files and text corpora. The build defines the defaults; the environment
// overrides them so one test binary can run against another checkout's data.
#pragma once
#include <cstdlib>
#include <string>

#ifndef INFOKV_DEFAULT_MODELS_DIR
#define INFOKV_DEFAULT_MODELS_DIR "/work/shared/models"
#endif
#ifndef INFOKV_DEFAULT_CORPORA_DIR
#define INFOKV_DEFAULT_CORPORA_DIR "/work/shared/corpora"
#endif

#ifndef INFOKV_DEFAULT_SMOLLM2_PATH
#define INFOKV_DEFAULT_SMOLLM2_PATH ""
#endif
#ifndef INFOKV_DEFAULT_QWEN25_CODER_PATH
#define INFOKV_DEFAULT_QWEN25_CODER_PATH ""
#endif
#ifndef INFOKV_TEST_DATA_DIR
#define INFOKV_TEST_DATA_DIR "tests/data"
#endif

namespace infokv_test {

inline std::string env_or(const char *name, const char *fallback) {
  const char *v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : std::string(fallback);
}

inline std::string models_dir() { return env_or("INFOKV_MODELS_DIR", INFOKV_DEFAULT_MODELS_DIR); }
// SmolLM2-135M-Instruct Q4_1 as installed by packaging/fetch_models.sh; $INFOKV_SMOLLM2 overrides.
inline std::string smollm2_path() { return env_or("INFOKV_SMOLLM2", INFOKV_DEFAULT_SMOLLM2_PATH); }
// Qwen2.5-Coder-0.5B-Instruct (real qwen2 weights) from packaging/fetch_models.sh --model qwen2.5-coder-0.5b;
// $INFOKV_QWEN25_CODER overrides.
inline std::string qwen25_coder_path() { return env_or("INFOKV_QWEN25_CODER", INFOKV_DEFAULT_QWEN25_CODER_PATH); }
inline std::string test_data_dir() { return INFOKV_TEST_DATA_DIR; }
inline std::string corpora_dir() { return env_or("INFOKV_CORPORA_DIR", INFOKV_DEFAULT_CORPORA_DIR); }

}  // namespace infokv_test
