// libFuzzer target for the GGUF reader and the model-level validation behind it. An input must either parse or be
// refused with infokv::Error; any other exception, a crash, a sanitizer report, a hang or a huge allocation is a
// finding. When the header parses, the tokenizer is built from it and, through an in-memory file, Model::load runs
// its semantic checks (hyper-parameters, tensor names, shapes and types).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "gguf/gguf.hpp"
#include "model/model.hpp"
#include "tokenizer/tokenizer.hpp"
#include "util/error.hpp"

namespace {

// Model::load takes a path: give it a memfd's /proc path (no disk I/O, nothing left behind).
void load_through_memfd(const uint8_t *data, size_t size) {
  int fd = ::memfd_create("infokv-fuzz", MFD_CLOEXEC);
  if (fd < 0) return;
  size_t done = 0;
  while (done < size) {
    ssize_t w = ::write(fd, data + done, size - done);
    if (w <= 0) break;
    done += static_cast<size_t>(w);
  }
  if (done == size) {
    try {
      auto m = infokv::Model::load("/proc/self/fd/" + std::to_string(fd));
      (void)m->n_params();
    } catch (const infokv::Error &) {
    }
  }
  ::close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  try {
    infokv::GgufFile f(data, size);
    // Touch what the parse produced: every value and every tensor's bytes (ASan checks they lie in the input).
    uint64_t sink = 0;
    for (const auto &kv : f.metadata()) {
      const infokv::GgufValue &v = kv.second;
      sink += v.u + static_cast<uint64_t>(v.i) + v.s.size() + v.count;
      for (std::string_view s : v.strings) sink += s.empty() ? 0 : static_cast<uint8_t>(s.back());
    }
    for (const auto &t : f.tensors())
      if (t.n_bytes > 0) sink += t.data[0] + t.data[t.n_bytes - 1];
    if (sink == 0x5eed) std::fputc(' ', stderr);  // keep the reads
    try {
      infokv::Tokenizer tok = infokv::Tokenizer::from_gguf(f);
      std::vector<int32_t> ids = tok.encode("Once upon a time \xE2\x96\x81 <0x0A> \xFF\xC3", true);
      (void)tok.decode(ids);
    } catch (const infokv::Error &) {
    }
  } catch (const infokv::Error &) {
    return 0;
  }
  load_through_memfd(data, size);
  return 0;
}
