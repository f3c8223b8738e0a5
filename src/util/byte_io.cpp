#include "util/byte_io.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "util/error.hpp"
#include "util/fault_injection.hpp"

namespace infokv {

void VectorSink::write(const void *p, size_t n) {
  const auto *b = static_cast<const uint8_t *>(p);
  bytes_.insert(bytes_.end(), b, b + n);
}

void SpanSink::write(const void *p, size_t n) {
  if (n == 0) return;
  if (n > cap_ - n_) fail(Status::buffer_too_small, "snapshot buffer of " + std::to_string(cap_) + " bytes is too small");
  std::memcpy(p_ + n_, p, n);
  n_ += n;
}

size_t MemorySource::read(void *p, size_t n) {
  const size_t k = std::min(n, n_ - off_);
  if (k == 0) return 0;
  std::memcpy(p, p_ + off_, k);
  off_ += k;
  return k;
}

void FileSink::write(const void *p, size_t n) {
  file_.write(p, n);
  n_ += n;
}

FileSource::FileSource(const std::string &path) : path_(path) {
  RegularFile file(path);  // refuses FIFOs and devices before anything blocks on them
  size_ = file.size();
  f_ = ::fdopen(file.fd(), "rb");
  if (f_ == nullptr) fail(Status::io, "cannot read '" + path + "': " + std::strerror(errno));
  file.release();  // f_ owns the descriptor from here
}

FileSource::~FileSource() {
  if (f_ != nullptr) std::fclose(f_);
}

size_t FileSource::read(void *p, size_t n) {
  if (fault::hit(fault::Op::read)) fail(Status::io, "cannot read '" + path_ + "': " + std::strerror(errno));
  const size_t k = std::fread(p, 1, n, f_);
  if (k < n && std::ferror(f_)) fail(Status::io, "cannot read '" + path_ + "': " + std::strerror(errno));
  off_ += static_cast<int64_t>(k);
  return k;
}

void write_tensor_data(ByteSink &out, const std::vector<std::pair<uint64_t, uint64_t>> &sizes, uint64_t align,
                       const TensorFill &fill, const std::function<void(uint64_t, uint64_t)> &progress, uint64_t total) {
  static const uint8_t zeros[64] = {};
  uint64_t written = 0;
  std::vector<uint8_t> buf;
  const uint64_t chunk = uint64_t{1} << 22;  // elements per fill call
  for (size_t i = 0; i < sizes.size(); ++i) {
    const uint64_t n = sizes[i].first, es = sizes[i].second;
    for (uint64_t first = 0; first < n; first += chunk) {
      const uint64_t cnt = std::min(chunk, n - first);
      buf.resize(static_cast<size_t>(cnt * es));
      fill(i, first, cnt, buf.data());
      out.write(buf.data(), buf.size());
      written += buf.size();
      if (progress) progress(written, total);
    }
    for (uint64_t pad = (n * es + align - 1) / align * align - n * es; pad > 0;) {
      const uint64_t k = std::min<uint64_t>(pad, sizeof zeros);
      out.write(zeros, static_cast<size_t>(k));
      written += k;
      pad -= k;
    }
  }
}

}  // namespace infokv
