// The user configuration (schemas/config.fbs): read from JSON text or the binary FlatBuffer, validated, and
// written back in both forms. Every failure throws Error(bad_config) with a message naming the field.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "sampling/sampler.hpp"
#include "session/session_options.hpp"

namespace infokv {

// A config: the model, the session's options (device and protected prefix included) and the sampler's. The schema's
// deprecated self_tuning block is read only to refuse enabled = true (nothing applies it).
struct Config {
  std::string model_path;
  SessionOptions session;
  SamplerParams sampler;
};

Config config_from_json(const std::string &text);
Config config_from_binary(const void *data, size_t size);

// Config files are small; the limit keeps a wrong path (a log, a model, /dev/zero) from being read into memory.
constexpr int64_t kMaxConfigFileBytes = int64_t{16} << 20;
// A config file in either form: the binary one carries the identifier "IKVC" at bytes 4..7, anything else is read
// as JSON. Throws Error(io) for a file that cannot be read, is not a regular file (a FIFO or device: refused
// without blocking) or is larger than kMaxConfigFileBytes; Error(bad_config) for its content.
Config config_from_file(const std::string &path);
std::string config_to_json(const Config &c);  // every field, defaults included, indented
std::vector<uint8_t> config_to_binary(const Config &c);
void validate_config(const Config &c);  // the semantic checks both readers run
// The one rule for a config's model_path, in the library (ikv_model_load_with_config) and the CLI alike: an
// absolute path is used as it is; a relative one names a file or checkpoint directory under the working directory,
// or, when none is there, under $INFOKV_MODELS_DIR (when set). Probed with stat, never opened (a FIFO found here
// would block); a path found nowhere is returned as given, so that the loader's error names it.
std::string resolve_config_model_path(const std::string &model_path);

// The config schema's text compiled into the library (generated from schemas/config.fbs at build time).
const char *schema_text_config();

}  // namespace infokv
