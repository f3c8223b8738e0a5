// Read-only memory mapping of a whole file (RAII).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace infokv {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string &path);  // throws Error(io)
  ~MappedFile();
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;
  MappedFile(MappedFile &&other) noexcept;
  MappedFile &operator=(MappedFile &&other) noexcept;

  const uint8_t *data() const { return data_; }
  size_t size() const { return size_; }
  // Gives the pages wholly inside [p, p + n) back to the kernel (MADV_DONTNEED) when that range lies in this mapping;
  // a later read maps them again from the file, so the bytes seen do not change. True when the range was ours.
  bool release(const void *p, size_t n) const;

 private:
  void reset() noexcept;
  const uint8_t *data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace infokv
