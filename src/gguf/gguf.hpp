// GGUF (v2, v3) reader over a memory mapping. Every count, offset and size is checked against the file
// before use; a malformed file throws Error(bad_model) naming what is wrong.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "util/mapped_file.hpp"

namespace infokv {

enum class GgufValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

const char *gguf_value_type_name(GgufValueType t);

// One metadata value. Scalars are widened; strings and string arrays are views into the mapping;
// numeric arrays point at their raw little-endian elements inside the mapping.
struct GgufValue {
  GgufValueType type = GgufValueType::UINT8;
  uint64_t u = 0;       // unsigned integers and BOOL
  int64_t i = 0;        // signed integers (also set for unsigned ones that fit)
  double f = 0;         // FLOAT32/FLOAT64
  std::string_view s;   // STRING
  // ARRAY
  GgufValueType elem_type = GgufValueType::UINT8;
  uint64_t count = 0;
  const uint8_t *raw = nullptr;          // numeric elements, count * element size bytes
  std::vector<std::string_view> strings; // STRING elements

  bool is_integer() const;
  bool is_float() const { return type == GgufValueType::FLOAT32 || type == GgufValueType::FLOAT64; }
};

struct GgufTensor {
  std::string name;
  uint32_t type = 0;        // GgmlType number
  uint32_t n_dims = 0;
  uint64_t ne[4] = {1, 1, 1, 1};  // ne[0] is the innermost (contiguous) dimension
  uint64_t offset = 0;      // relative to the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const uint8_t *data = nullptr;
};

class GgufFile {
 public:
  // Maps and parses `path`. Throws Error(io) when the file cannot be read, Error(bad_model) when it is malformed,
  // Error(unsupported) for a version it does not read.
  explicit GgufFile(const std::string &path);
  // Parses a caller-owned buffer (used by the fuzzer and tests); the buffer must outlive this object.
  GgufFile(const uint8_t *data, size_t size);

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  size_t file_size() const { return size_; }
  const MappedFile &mapping() const { return map_; }  // empty over a caller-owned buffer
  const std::map<std::string, GgufValue> &metadata() const { return kv_; }
  const std::vector<GgufTensor> &tensors() const { return tensors_; }

  const GgufValue *find(const std::string &key) const;
  const GgufTensor *find_tensor(const std::string &name) const;

  // Typed getters: throw Error(bad_model) naming the key when it is missing (for the *_req forms) or of a wrong type.
  std::string get_string(const std::string &key, const std::string &fallback) const;
  std::string get_string_req(const std::string &key) const;
  int64_t get_int(const std::string &key, int64_t fallback) const;
  int64_t get_int_req(const std::string &key) const;
  double get_float(const std::string &key, double fallback) const;
  bool get_bool(const std::string &key, bool fallback) const;
  const GgufValue *get_array(const std::string &key, GgufValueType elem) const;  // nullptr when missing

 private:
  void parse();
  MappedFile map_;
  const uint8_t *base_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace infokv
