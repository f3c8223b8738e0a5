// Reader of the safetensors format (Hugging Face checkpoints): an 8-byte little-endian header length, a JSON header
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the tensor bytes.
// Everything in the header is validated before any tensor is exposed, as for GGUF: offsets inside the data,
// sizes equal to shape x dtype size (overflow-checked), no two tensors overlapping, a bounded header.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "util/mapped_file.hpp"

namespace infokv {

enum class StDtype { F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL };

const char *st_dtype_name(StDtype t);
size_t st_dtype_size(StDtype t);

struct StTensor {
  std::string name;
  StDtype dtype = StDtype::F32;
  std::vector<uint64_t> shape;  // outermost first, as PyTorch writes it
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const uint8_t *data = nullptr;  // into the mapping; no alignment is guaranteed
};

class SafetensorsFile {
 public:
  // Maps and validates `path`. Throws Error(io) when it cannot be read, Error(bad_model) when it is malformed,
  // Error(unsupported) for a dtype infokv does not read (F8 types, ...), naming the tensor.
  explicit SafetensorsFile(const std::string &path);
  // The same over bytes owned by the caller (tests, fuzzing); `bytes` must outlive the object.
  SafetensorsFile(const uint8_t *bytes, size_t size, const std::string &what = "safetensors buffer");

  const std::vector<StTensor> &tensors() const { return tensors_; }
  const StTensor *find(const std::string &name) const;
  const std::map<std::string, std::string> &metadata() const { return metadata_; }
  const MappedFile &mapping() const { return file_; }  // empty over a caller-owned buffer

 private:
  void parse(const uint8_t *bytes, size_t size, const std::string &what);
  MappedFile file_;
  std::vector<StTensor> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace infokv
