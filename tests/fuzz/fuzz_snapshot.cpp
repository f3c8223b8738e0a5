// libFuzzer target for the snapshot reader: inspect() (no model) on every input, and restore() into a session of
// stories260K when $INFOKV_MODELS_DIR (or ../shared/models) holds it. Any exception is fine; a crash, a sanitizer
// report, or a restore that changes the session's state after failing is a bug.
// Build: clang++ -fsanitize=fuzzer,address,undefined with infokv_core (see the note in tests/fuzz/CMakeLists.txt).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <xxhash.h>

#include "model/model.hpp"
#include "session/session.hpp"
#include "snapshot/snapshot.hpp"
#include "util/error.hpp"

namespace {

std::shared_ptr<const infokv::Model> fuzz_model() {
  static std::shared_ptr<const infokv::Model> m = [] {
    const char *d = std::getenv("INFOKV_MODELS_DIR");
    const std::string dir = d != nullptr && *d != '\0' ? d : "../shared/models";
    try {
      return infokv::Model::load(dir + "/stories260K/stories260K.gguf");
    } catch (const infokv::Error &) {
      return std::shared_ptr<const infokv::Model>();
    }
  }();
  return m;
}

// Recomputes every chunk checksum and the end mark of a damaged file, so that mutations get past the container
// checks to the FlatBuffers verifier and the semantic checks behind it.
std::vector<uint8_t> reseal(const uint8_t *data, size_t size) {
  std::vector<uint8_t> out = {'I', 'K', 'V', 'S', 'N', 'A', 'P', 0};
  auto put = [&out](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  size_t off = 8;
  uint64_t chunks = 0;
  while (off + 12 <= size) {
    uint64_t n = 0;
    for (int i = 0; i < 4; ++i) n |= static_cast<uint64_t>(data[off + static_cast<size_t>(i)]) << (8 * i);
    if (n == 0 || off + 12 + n > size) break;
    put(n, 4);
    put(XXH3_64bits(data + off + 12, n), 8);
    out.insert(out.end(), data + off + 12, data + off + 12 + n);
    off += 12 + n;
    ++chunks;
  }
  const uint64_t h = XXH3_64bits(out.data(), out.size());
  put(0, 4);
  put(chunks, 8);
  put(h, 8);
  return out;
}

void check_inspect(const uint8_t *data, size_t size) {
  try {
    infokv::snapshot::MemorySource src(data, size);
    (void)infokv::snapshot::inspect(src);
  } catch (const infokv::Error &) {
  }
}

void check_restore(const uint8_t *data, size_t size);

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  check_inspect(data, size);
  check_restore(data, size);
  const std::vector<uint8_t> sealed = reseal(data, size);
  check_inspect(sealed.data(), sealed.size());
  check_restore(sealed.data(), sealed.size());
  return 0;
}

namespace {
void check_restore(const uint8_t *data, size_t size) {
  auto m = fuzz_model();
  if (!m) return;
  infokv::SessionOptions o;
  o.n_threads = 1;
  o.kv_pool_blocks = 256;
  infokv::Session s(m, o);
  const int64_t used = s.kv().stats().blocks_used;
  try {
    infokv::snapshot::MemorySource src(data, size);
    infokv::Sampler sampler(infokv::SamplerParams{});
    (void)infokv::snapshot::restore(s, &sampler, src);
  } catch (const infokv::Error &) {
    if (s.kv().stats().blocks_used != used || !s.kv().sequence_ids().empty()) std::abort();  // not all-or-nothing
  }
  s.kv().check_invariants();
}
}  // namespace
