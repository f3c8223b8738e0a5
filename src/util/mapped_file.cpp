#include "util/mapped_file.hpp"

#include <cerrno>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>

#include "util/error.hpp"
#include "util/file_io.hpp"

namespace infokv {

MappedFile::MappedFile(const std::string &path) {
  const RegularFile file(path);  // a FIFO or device is refused before anything blocks on it
  size_ = static_cast<size_t>(file.size());
  if (size_ > 0) {
    void *p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd(), 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      size_ = 0;
      fail(Status::io, "cannot map '" + path + "': " + std::strerror(e));
    }
    data_ = static_cast<const uint8_t *>(p);
  }
}

MappedFile::~MappedFile() { reset(); }

bool MappedFile::release(const void *p, size_t n) const {
  const auto a = reinterpret_cast<uintptr_t>(p), base = reinterpret_cast<uintptr_t>(data_);
  if (data_ == nullptr || a < base || n > size_ || a - base > size_ - n) return false;
  const long ps = ::sysconf(_SC_PAGESIZE);
  const uintptr_t page = ps > 0 ? static_cast<uintptr_t>(ps) : 4096;
  const uintptr_t b = (a + page - 1) / page * page, e = (a + n) / page * page;
  if (e > b) ::madvise(reinterpret_cast<void *>(b), e - b, MADV_DONTNEED);
  return true;
}

MappedFile::MappedFile(MappedFile &&other) noexcept : data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile &MappedFile::operator=(MappedFile &&other) noexcept {
  if (this != &other) {
    reset();
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

void MappedFile::reset() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t *>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace infokv
