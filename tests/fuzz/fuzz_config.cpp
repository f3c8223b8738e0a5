// libFuzzer target for the config readers: the input is tried as JSON text and as the binary form. Any
// infokv::Error is fine; a crash or a sanitizer report is a bug. A config that reads must write and re-read.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  try {
    const infokv::Config c = infokv::config_from_json(std::string(reinterpret_cast<const char *>(data), size));
    const std::vector<uint8_t> b = infokv::config_to_binary(c);
    (void)infokv::config_from_json(infokv::config_to_json(infokv::config_from_binary(b.data(), b.size())));
  } catch (const infokv::Error &e) {
    if (e.status() == infokv::Status::internal) std::abort();
  }
  try {
    const infokv::Config c = infokv::config_from_binary(data, size);
    (void)infokv::config_to_json(c);
  } catch (const infokv::Error &e) {
    if (e.status() == infokv::Status::internal) std::abort();
  }
  return 0;
}
