// libFuzzer target for the safetensors reader (Hugging Face checkpoints): the 8-byte header length, the JSON header
// (dtypes, shapes, offsets, __metadata__) and the tensors' byte ranges. Any infokv::Error is fine; a crash or a
// sanitizer report is a bug, and every tensor it accepts must lie inside the buffer with as many bytes as its
// shape and dtype say.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "model/safetensors.hpp"
#include "util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // A copy of exactly `size` bytes, so a read past the end is a sanitizer report.
  const std::vector<uint8_t> bytes(data, data + size);
  try {
    const infokv::SafetensorsFile f(bytes.data(), bytes.size(), "fuzz input");
    for (const infokv::StTensor &t : f.tensors()) {
      uint64_t n = 1;
      for (uint64_t d : t.shape) n *= d;
      if (n != t.n_elements) std::abort();
      if (t.n_bytes > 0 && (t.data < bytes.data() || t.data + t.n_bytes > bytes.data() + bytes.size())) std::abort();
      if (f.find(t.name) != &t) std::abort();
      volatile uint8_t sink = 0;
      if (t.n_bytes > 0) sink = static_cast<uint8_t>(t.data[0] ^ t.data[t.n_bytes - 1]);
      (void)sink;
    }
  } catch (const infokv::Error &e) {
    if (e.status() == infokv::Status::internal) std::abort();
  }
  return 0;
}
