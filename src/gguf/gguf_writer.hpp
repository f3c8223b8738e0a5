// A streaming GGUF v3 writer: metadata and tensor descriptions first, then tensor data produced chunk by chunk by
// a callback, so multi-GB files (synthetic 8B models) never sit in memory. Little-endian hosts only.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace infokv {

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t alignment = 32) : alignment_(alignment) {}

  void add_string(const std::string &key, const std::string &v);
  void add_u32(const std::string &key, uint32_t v);
  void add_f32(const std::string &key, float v);
  void add_bool(const std::string &key, bool v);
  void add_string_array(const std::string &key, const std::vector<std::string> &v);
  void add_f32_array(const std::string &key, const std::vector<float> &v);
  void add_i32_array(const std::string &key, const std::vector<int32_t> &v);

  // `ne` innermost first (GGUF order); type F32, F16 or BF16 (bytes per element 4 or 2).
  void add_tensor(const std::string &name, uint32_t ggml_type, const std::vector<uint64_t> &ne);

  // Fills `out` with elements [first, first + count) of tensor `index` in its own type (count * element bytes).
  using Fill = std::function<void(size_t index, uint64_t first, uint64_t count, uint8_t *out)>;
  // Writes the file through a temporary renamed over `path` at the end, so a failure (Error(io), or whatever
  // `fill` throws) never leaves a partial file under `path`. `progress` (may be empty) gets the data bytes written
  // so far and their total.
  void write(const std::string &path, const Fill &fill, const std::function<void(uint64_t, uint64_t)> &progress = {}) const;

  uint64_t data_bytes() const;

 private:
  struct Tensor {
    std::string name;
    uint32_t type;
    std::vector<uint64_t> ne;
    uint64_t n_elements;
    uint64_t n_bytes;
  };
  std::vector<uint8_t> kv_;
  uint64_t n_kv_ = 0;
  std::vector<Tensor> tensors_;
  uint32_t alignment_;
};

}  // namespace infokv
