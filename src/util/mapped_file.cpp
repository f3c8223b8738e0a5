#include "util/mapped_file.hpp"

#include <cerrno>
#include <cstring>
#include <sys/mman.h>

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
