// A streaming writer of the safetensors format that SafetensorsFile reads: an 8-byte little-endian header length,
// the JSON header padded with spaces to a multiple of 8 (so the data starts aligned), then the tensors' bytes,
// contiguous in the order they were added (the reference implementation refuses holes). Tensor data is produced
// chunk by chunk by a callback, so multi-GB checkpoints never sit in memory. Little-endian hosts only.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "model/safetensors.hpp"

namespace infokv {

class SafetensorsWriter {
 public:
  // A string entry of "__metadata__" (transformers expects {"format": "pt"}).
  void add_metadata(const std::string &key, const std::string &value);
  // `shape` outermost first, as PyTorch writes it. Throws Error(invalid_argument) for an empty, duplicate or
  // reserved ("__metadata__") name, or a size that overflows 64 bits.
  void add_tensor(const std::string &name, StDtype dtype, const std::vector<uint64_t> &shape);

  // The header as written after the length: JSON padded with spaces to a multiple of 8 bytes.
  std::string header() const;
  uint64_t data_bytes() const { return data_bytes_; }

  // Fills `out` with elements [first, first + count) of tensor `index` (in the order added) in its dtype.
  using Fill = std::function<void(size_t index, uint64_t first, uint64_t count, uint8_t *out)>;
  // Writes the file through a temporary renamed over `path` at the end, so a failure (Error(io), or whatever
  // `fill` throws) never leaves a partial file under `path`. `progress` (may be empty) gets the data bytes
  // written so far and their total.
  void write(const std::string &path, const Fill &fill, const std::function<void(uint64_t, uint64_t)> &progress = {}) const;

 private:
  struct Tensor {
    std::string name;
    StDtype dtype;
    std::vector<uint64_t> shape;
    uint64_t n_elements;
    uint64_t n_bytes;
  };
  std::vector<Tensor> tensors_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, size_t> index_;
  uint64_t data_bytes_ = 0;
};

}  // namespace infokv
