// The snapshot container (schemas/snapshot.fbs, top comment): magic, hashed size-prefixed FlatBuffer chunks and an
// end mark. ChunkWriter and ChunkReader hold one chunk at a time.
#pragma once
#include <cstdint>
#include <vector>

#include <flatbuffers/flatbuffers.h>
#include <xxhash.h>

#include "infokv_fb/snapshot_generated.h"
#include "util/byte_io.hpp"

namespace infokv {
namespace snapshot {
namespace fb = ::infokv::snap;

// The unsigned little-endian integer in the n <= 8 bytes at p, at any alignment (the container's size and checksum
// fields, and 8-byte vector elements, which the FlatBuffers verifier does not check for alignment).
inline uint64_t get_le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// RAII XXH3 streaming state.
class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(const Xxh3Stream &) = delete;
  Xxh3Stream &operator=(const Xxh3Stream &) = delete;
  void update(const void *p, size_t n);
  uint64_t digest() const;

 private:
  XXH3_state_t *st_;
};

inline uint64_t xxh3(const void *p, size_t n) { return XXH3_64bits(p, n); }

class ChunkWriter {
 public:
  explicit ChunkWriter(ByteSink &out);  // writes the magic
  void put(const flatbuffers::FlatBufferBuilder &b);
  void finish();                        // writes the end mark

 private:
  void emit(const void *p, size_t n);
  ByteSink &out_;
  Xxh3Stream hash_;
  uint64_t n_chunks_ = 0;
};

class ChunkReader {
 public:
  explicit ChunkReader(ByteSource &in);  // reads and checks the magic; throws Error(bad_snapshot)
  // The next verified chunk (valid until the next call), or null after a checked end mark.
  const fb::Chunk *next();
  int64_t bytes_read() const { return bytes_; }
  int64_t chunks() const { return n_chunks_; }

 private:
  void read_exact(void *p, size_t n, const char *what);
  ByteSource &in_;
  Xxh3Stream hash_;
  std::vector<uint8_t> buf_;
  int64_t n_chunks_ = 0;
  int64_t bytes_ = 0;
};

}  // namespace snapshot
}  // namespace infokv
