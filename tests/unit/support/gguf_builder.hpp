// A small little-endian GGUF writer for tests: builds valid files from metadata and tensors, and, through the raw
// hooks (add_raw, add_tensor_info, override_*_count, bytes patched after build), deliberately broken ones.
// Header-only and independent of the reader under test, so the two cannot share a bug.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace infokv_test {

// GGUF metadata value types (numbered as in the GGUF spec).
enum class GgufType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

class ByteWriter {
 public:
  std::vector<uint8_t> bytes;
  template <typename T> void le(T v) {  // integers and IEEE floats, least significant byte first on any host
    static_assert(sizeof(T) <= 8, "scalar only");
    uint64_t u = 0;
    std::memcpy(&u, &v, sizeof(T));
    for (size_t k = 0; k < sizeof(T); ++k) bytes.push_back(static_cast<uint8_t>(u >> (8 * k)));
  }
  void str(const std::string &s) {
    le<uint64_t>(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  void raw(const void *p, size_t n) {
    const auto *b = static_cast<const uint8_t *>(p);
    bytes.insert(bytes.end(), b, b + n);
  }
};

class GgufBuilder {
 public:
  GgufBuilder &set_version(uint32_t v) { version_ = v; return *this; }
  // Alignment used to place tensor data. It does not write general.alignment: add that key (add_u32) when the
  // file should declare a non-default alignment, or omit it to test a file that lies about it.
  GgufBuilder &set_alignment(uint32_t a) { alignment_ = a; return *this; }
  GgufBuilder &override_kv_count(uint64_t n) { kv_count_override_ = n; has_kv_override_ = true; return *this; }
  GgufBuilder &override_tensor_count(uint64_t n) { tensor_count_override_ = n; has_tensor_override_ = true; return *this; }

  // ---- metadata ----
  GgufBuilder &add_u8(const std::string &k, uint8_t v) { return scalar(k, GgufType::UINT8, v); }
  GgufBuilder &add_i8(const std::string &k, int8_t v) { return scalar(k, GgufType::INT8, v); }
  GgufBuilder &add_u16(const std::string &k, uint16_t v) { return scalar(k, GgufType::UINT16, v); }
  GgufBuilder &add_i16(const std::string &k, int16_t v) { return scalar(k, GgufType::INT16, v); }
  GgufBuilder &add_u32(const std::string &k, uint32_t v) { return scalar(k, GgufType::UINT32, v); }
  GgufBuilder &add_i32(const std::string &k, int32_t v) { return scalar(k, GgufType::INT32, v); }
  GgufBuilder &add_u64(const std::string &k, uint64_t v) { return scalar(k, GgufType::UINT64, v); }
  GgufBuilder &add_i64(const std::string &k, int64_t v) { return scalar(k, GgufType::INT64, v); }
  GgufBuilder &add_f32(const std::string &k, float v) { return scalar(k, GgufType::FLOAT32, v); }
  GgufBuilder &add_f64(const std::string &k, double v) { return scalar(k, GgufType::FLOAT64, v); }
  GgufBuilder &add_bool(const std::string &k, bool v) { return scalar(k, GgufType::BOOL, static_cast<uint8_t>(v ? 1 : 0)); }
  GgufBuilder &add_string(const std::string &k, const std::string &v) {
    ByteWriter w;
    w.str(v);
    return add_raw(k, static_cast<uint32_t>(GgufType::STRING), w.bytes);
  }
  GgufBuilder &add_string_array(const std::string &k, const std::vector<std::string> &v) {
    ByteWriter w;
    w.le<uint32_t>(static_cast<uint32_t>(GgufType::STRING));
    w.le<uint64_t>(v.size());
    for (const std::string &s : v) w.str(s);
    return add_raw(k, static_cast<uint32_t>(GgufType::ARRAY), w.bytes);
  }
  GgufBuilder &add_f32_array(const std::string &k, const std::vector<float> &v) { return array(k, GgufType::FLOAT32, v); }
  GgufBuilder &add_i32_array(const std::string &k, const std::vector<int32_t> &v) { return array(k, GgufType::INT32, v); }
  GgufBuilder &add_u32_array(const std::string &k, const std::vector<uint32_t> &v) { return array(k, GgufType::UINT32, v); }
  GgufBuilder &add_i64_array(const std::string &k, const std::vector<int64_t> &v) { return array(k, GgufType::INT64, v); }
  // Any type number and payload (the bytes after the type field), unchecked.
  GgufBuilder &add_raw(const std::string &k, uint32_t type, const std::vector<uint8_t> &payload) {
    ByteWriter w;
    w.str(k);
    w.le<uint32_t>(type);
    w.raw(payload.data(), payload.size());
    kvs_.push_back(std::move(w.bytes));
    return *this;
  }

  // ---- tensors ----
  // `ne` innermost first; `data` is copied into the data section at the next aligned offset. The caller supplies
  // bytes of the right size for the type (or the wrong size, on purpose).
  GgufBuilder &add_tensor(const std::string &name, uint32_t ggml_type, const std::vector<uint64_t> &ne, const void *data,
                          size_t n_bytes) {
    Tensor t{name, ggml_type, ne, {}, false, 0};
    const auto *b = static_cast<const uint8_t *>(data);
    if (n_bytes > 0) t.data.assign(b, b + n_bytes);
    tensors_.push_back(std::move(t));
    return *this;
  }
  GgufBuilder &add_tensor_f32(const std::string &name, const std::vector<uint64_t> &ne, const std::vector<float> &v) {
    ByteWriter w;
    for (float f : v) w.le(f);
    return add_tensor(name, 0 /* F32 */, ne, w.bytes.data(), w.bytes.size());
  }
  // A tensor info with an explicit offset (relative to the data section) and no data of its own.
  GgufBuilder &add_tensor_info(const std::string &name, uint32_t ggml_type, const std::vector<uint64_t> &ne, uint64_t offset) {
    tensors_.push_back(Tensor{name, ggml_type, ne, {}, true, offset});
    return *this;
  }

  // The file. `data_start`, when given, receives the offset of the data section.
  std::vector<uint8_t> build(size_t *data_start = nullptr) const {
    ByteWriter w;
    w.raw("GGUF", 4);
    w.le<uint32_t>(version_);
    w.le<uint64_t>(has_tensor_override_ ? tensor_count_override_ : tensors_.size());
    w.le<uint64_t>(has_kv_override_ ? kv_count_override_ : kvs_.size());
    for (const auto &kv : kvs_) w.raw(kv.data(), kv.size());

    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const Tensor &t : tensors_) {
      uint64_t off = t.explicit_offset ? t.offset : next;
      offsets.push_back(off);
      if (!t.explicit_offset) next = align(off + t.data.size());
    }
    for (size_t k = 0; k < tensors_.size(); ++k) {
      const Tensor &t = tensors_[k];
      w.str(t.name);
      w.le<uint32_t>(static_cast<uint32_t>(t.ne.size()));
      for (uint64_t d : t.ne) w.le<uint64_t>(d);
      w.le<uint32_t>(t.type);
      w.le<uint64_t>(offsets[k]);
    }
    if (!tensors_.empty()) w.bytes.resize(static_cast<size_t>(align(w.bytes.size())), 0);
    const size_t start = w.bytes.size();
    if (data_start != nullptr) *data_start = start;
    for (size_t k = 0; k < tensors_.size(); ++k) {
      const Tensor &t = tensors_[k];
      if (t.data.empty()) continue;
      size_t at = start + static_cast<size_t>(offsets[k]);
      if (w.bytes.size() < at + t.data.size()) w.bytes.resize(at + t.data.size(), 0);
      std::memcpy(w.bytes.data() + at, t.data.data(), t.data.size());
    }
    return w.bytes;
  }

 private:
  struct Tensor {
    std::string name;
    uint32_t type;
    std::vector<uint64_t> ne;
    std::vector<uint8_t> data;
    bool explicit_offset;
    uint64_t offset;
  };

  template <typename T> GgufBuilder &scalar(const std::string &k, GgufType type, T v) {
    ByteWriter w;
    w.le(v);
    return add_raw(k, static_cast<uint32_t>(type), w.bytes);
  }
  template <typename T> GgufBuilder &array(const std::string &k, GgufType elem, const std::vector<T> &v) {
    ByteWriter w;
    w.le<uint32_t>(static_cast<uint32_t>(elem));
    w.le<uint64_t>(v.size());
    for (const T &x : v) w.le(x);
    return add_raw(k, static_cast<uint32_t>(GgufType::ARRAY), w.bytes);
  }
  uint64_t align(uint64_t x) const { return (x + alignment_ - 1) / alignment_ * alignment_; }

  uint32_t version_ = 3;
  uint32_t alignment_ = 32;
  std::vector<std::vector<uint8_t>> kvs_;
  std::vector<Tensor> tensors_;
  uint64_t kv_count_override_ = 0, tensor_count_override_ = 0;
  bool has_kv_override_ = false, has_tensor_override_ = false;
};

}  // namespace infokv_test
