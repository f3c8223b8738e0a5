#include "snapshot/container.hpp"

#include <cstring>
#include <new>
#include <string>

#include "util/error.hpp"

namespace infokv {
namespace snapshot {

namespace {
const char kMagic[8] = {'I', 'K', 'V', 'S', 'N', 'A', 'P', '\0'};
constexpr uint64_t kMaxChunk = (uint64_t{1} << 31) - 1;

void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
[[noreturn]] void bad(const std::string &m) { fail(Status::bad_snapshot, "corrupt snapshot: " + m); }
}  // namespace

Xxh3Stream::Xxh3Stream() : st_(XXH3_createState()) {
  if (st_ == nullptr) throw std::bad_alloc();
  XXH3_64bits_reset(st_);
}
Xxh3Stream::~Xxh3Stream() { XXH3_freeState(st_); }
void Xxh3Stream::update(const void *p, size_t n) { XXH3_64bits_update(st_, p, n); }
uint64_t Xxh3Stream::digest() const { return XXH3_64bits_digest(st_); }

ChunkWriter::ChunkWriter(ByteSink &out) : out_(out) { emit(kMagic, sizeof kMagic); }

void ChunkWriter::emit(const void *p, size_t n) {
  out_.write(p, n);
  hash_.update(p, n);
}

void ChunkWriter::put(const flatbuffers::FlatBufferBuilder &b) {
  const size_t n = b.GetSize();
  if (n == 0 || n > kMaxChunk) fail(Status::internal, "snapshot chunk of " + std::to_string(n) + " bytes");
  uint8_t pre[12];
  put_le(pre, n, 4);
  put_le(pre + 4, xxh3(b.GetBufferPointer(), n), 8);
  emit(pre, sizeof pre);
  emit(b.GetBufferPointer(), n);
  ++n_chunks_;
}

void ChunkWriter::finish() {
  uint8_t end[20];
  put_le(end, 0, 4);
  put_le(end + 4, n_chunks_, 8);
  put_le(end + 12, hash_.digest(), 8);
  out_.write(end, sizeof end);
}

ChunkReader::ChunkReader(ByteSource &in) : in_(in) {
  char m[8];
  if (in_.read(m, 8) != 8 || std::memcmp(m, kMagic, 8) != 0) bad("not an infokv snapshot (bad magic)");
  hash_.update(m, 8);
  bytes_ = 8;
}

void ChunkReader::read_exact(void *p, size_t n, const char *what) {
  if (in_.read(p, n) != n) bad(std::string("truncated in ") + what + " at byte " + std::to_string(bytes_));
  bytes_ += static_cast<int64_t>(n);
}

const fb::Chunk *ChunkReader::next() {
  uint8_t sz[4];
  read_exact(sz, 4, "a chunk size");
  const uint64_t n = get_le(sz, 4);
  if (n == 0) {
    uint8_t end[16];
    read_exact(end, 16, "the end mark");
    if (get_le(end, 8) != static_cast<uint64_t>(n_chunks_)) bad("end mark counts a different number of chunks");
    if (get_le(end + 8, 8) != hash_.digest()) bad("file checksum mismatch");
    uint8_t extra;
    if (in_.read(&extra, 1) != 0) bad("bytes after the end mark");
    return nullptr;
  }
  if (n > kMaxChunk) bad("chunk size " + std::to_string(n) + " at byte " + std::to_string(bytes_ - 4) + " is too large");
  const int64_t left = in_.remaining();
  if (left >= 0 && static_cast<uint64_t>(left) < n + 8) bad("truncated (chunk of " + std::to_string(n) + " bytes at byte " + std::to_string(bytes_ - 4) + ")");
  hash_.update(sz, 4);
  uint8_t h[8];
  read_exact(h, 8, "a chunk checksum");
  hash_.update(h, 8);
  buf_.resize(static_cast<size_t>(n));
  read_exact(buf_.data(), buf_.size(), "a chunk");
  hash_.update(buf_.data(), buf_.size());
  if (xxh3(buf_.data(), buf_.size()) != get_le(h, 8)) bad("checksum mismatch in chunk " + std::to_string(n_chunks_));
  if (n < 8 || !flatbuffers::BufferHasIdentifier(buf_.data(), fb::ChunkIdentifier()))
    bad("chunk " + std::to_string(n_chunks_) + " lacks the IKVS identifier");
  flatbuffers::Verifier v(buf_.data(), buf_.size());
  if (!fb::VerifyChunkBuffer(v)) bad("chunk " + std::to_string(n_chunks_) + " fails the FlatBuffers verifier");
  ++n_chunks_;
  return fb::GetChunk(buf_.data());
}

}  // namespace snapshot
}  // namespace infokv
