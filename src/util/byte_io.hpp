// Byte streams for the file writers and readers (snapshots, GGUF and safetensors writers): written and read one
// piece at a time, so files of any size never sit in memory twice. Files are owned by RAII objects; every failure
// throws Error(io).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <utility>
#include <string>
#include <vector>

#include "util/file_io.hpp"

namespace infokv {

class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual void write(const void *p, size_t n) = 0;
};

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Reads up to n bytes; returns how many (fewer only at the end of the data).
  virtual size_t read(void *p, size_t n) = 0;
  // Bytes left, or -1 when unknown. Lets a reader refuse a size field larger than the data before allocating.
  virtual int64_t remaining() const = 0;
};

class CountingSink : public ByteSink {
 public:
  void write(const void *, size_t n) override { n_ += n; }
  size_t size() const { return n_; }

 private:
  size_t n_ = 0;
};

class VectorSink : public ByteSink {
 public:
  void write(const void *p, size_t n) override;
  std::vector<uint8_t> &bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

// Writes into a caller's buffer of fixed capacity; throws Error(buffer_too_small) past its end.
class SpanSink : public ByteSink {
 public:
  SpanSink(uint8_t *p, size_t cap) : p_(p), cap_(cap) {}
  void write(const void *p, size_t n) override;
  size_t size() const { return n_; }

 private:
  uint8_t *p_;
  size_t cap_;
  size_t n_ = 0;
};

class MemorySource : public ByteSource {
 public:
  MemorySource(const void *p, size_t n) : p_(static_cast<const uint8_t *>(p)), n_(n) {}
  size_t read(void *p, size_t n) override;
  int64_t remaining() const override { return static_cast<int64_t>(n_ - off_); }

 private:
  const uint8_t *p_;
  size_t n_;
  size_t off_ = 0;
};

// Writes `path` through an AtomicFile (util/file_io.hpp): a unique temporary in the destination's directory,
// fsynced and renamed over `path` on commit(), so a failed or concurrent save never leaves half a file or a mix of
// two under the final name, and a link planted next to it is never followed. Without commit() (an exception), the
// temporary is removed by the destructor.
class FileSink : public ByteSink {
 public:
  explicit FileSink(const std::string &path, AtomicFile::Temp temp = AtomicFile::Temp::automatic,
                    AtomicFile::Sync sync = AtomicFile::Sync::durable)
      : file_(path, temp, sync) {}
  void write(const void *p, size_t n) override;
  void commit() { file_.commit(); }
  size_t size() const { return n_; }

 private:
  AtomicFile file_;
  size_t n_ = 0;
};

// Streams the bytes of several tensors into `out` chunk by chunk, so multi-GB model files never sit in memory:
// tensor i has sizes[i].first elements of sizes[i].second bytes; fill(i, first, count, buf) produces elements
// [first, first + count) of it; each tensor is followed by zeros up to a multiple of `align` bytes (1: none).
// progress (may be empty) gets the bytes written so far (padding included) and `total`.
using TensorFill = std::function<void(size_t index, uint64_t first, uint64_t count, uint8_t *out)>;
void write_tensor_data(ByteSink &out, const std::vector<std::pair<uint64_t, uint64_t>> &sizes, uint64_t align,
                       const TensorFill &fill, const std::function<void(uint64_t, uint64_t)> &progress, uint64_t total);

// Reads a regular file (anything else is refused with Error(io): a FIFO or device would block or never end).
class FileSource : public ByteSource {
 public:
  explicit FileSource(const std::string &path);
  ~FileSource() override;
  FileSource(const FileSource &) = delete;
  FileSource &operator=(const FileSource &) = delete;
  size_t read(void *p, size_t n) override;
  int64_t remaining() const override { return size_ - off_; }
  int64_t size() const { return size_; }

 private:
  std::string path_;
  std::FILE *f_ = nullptr;
  int64_t size_ = 0;
  int64_t off_ = 0;
};

}  // namespace infokv
