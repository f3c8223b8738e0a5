#include "gguf/gguf.hpp"

#include <cstring>
#include <limits>

#include "kernels/ggml_types.hpp"
#include "util/error.hpp"

namespace infokv {

namespace {

constexpr uint32_t kMaxDims = 4;
constexpr uint64_t kMaxKeyLen = 1u << 16;  // a key longer than this is a corrupt file, not a real key
constexpr int kMaxArrayDepth = 2;

size_t scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8: case GgufValueType::INT8: case GgufValueType::BOOL: return 1;
    case GgufValueType::UINT16: case GgufValueType::INT16: return 2;
    case GgufValueType::UINT32: case GgufValueType::INT32: case GgufValueType::FLOAT32: return 4;
    case GgufValueType::UINT64: case GgufValueType::INT64: case GgufValueType::FLOAT64: return 8;
    default: return 0;
  }
}

[[noreturn]] void corrupt(const std::string &what) { fail(Status::bad_model, "malformed GGUF: " + what); }

// Bounds-checked little-endian cursor over the file.
class Reader {
 public:
  Reader(const uint8_t *p, size_t n) : p_(p), n_(n) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return n_ - pos_; }
  const uint8_t *here() const { return p_ + pos_; }
  void need(uint64_t bytes, const char *what) const {
    if (bytes > remaining()) corrupt(std::string("truncated while reading ") + what + " at offset " + std::to_string(pos_));
  }
  template <typename T> T read(const char *what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string_view str(const char *what, uint64_t max_len = std::numeric_limits<uint64_t>::max()) {
    uint64_t len = read<uint64_t>(what);
    if (len > max_len) corrupt(std::string(what) + " length " + std::to_string(len) + " is absurd");
    need(len, what);
    std::string_view s(reinterpret_cast<const char *>(p_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }
  void skip(uint64_t bytes, const char *what) {
    need(bytes, what);
    pos_ += static_cast<size_t>(bytes);
  }

 private:
  const uint8_t *p_;
  size_t n_;
  size_t pos_ = 0;
};

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::FLOAT64); }

void read_scalar(Reader &r, GgufValue &v, const std::string &key) {
  const char *what = "metadata value";
  switch (v.type) {
    case GgufValueType::UINT8: v.u = r.read<uint8_t>(what); v.i = static_cast<int64_t>(v.u); break;
    case GgufValueType::INT8: v.i = r.read<int8_t>(what); break;
    case GgufValueType::UINT16: v.u = r.read<uint16_t>(what); v.i = static_cast<int64_t>(v.u); break;
    case GgufValueType::INT16: v.i = r.read<int16_t>(what); break;
    case GgufValueType::UINT32: v.u = r.read<uint32_t>(what); v.i = static_cast<int64_t>(v.u); break;
    case GgufValueType::INT32: v.i = r.read<int32_t>(what); break;
    case GgufValueType::FLOAT32: v.f = r.read<float>(what); break;
    case GgufValueType::BOOL: {
      uint8_t b = r.read<uint8_t>(what);
      if (b > 1) corrupt("bool value " + std::to_string(b) + " for key '" + key + "'");
      v.u = b;
      v.i = b;
      break;
    }
    case GgufValueType::UINT64:
      v.u = r.read<uint64_t>(what);
      v.i = v.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                                               : static_cast<int64_t>(v.u);
      break;
    case GgufValueType::INT64: v.i = r.read<int64_t>(what); break;
    case GgufValueType::FLOAT64: v.f = r.read<double>(what); break;
    case GgufValueType::STRING: v.s = r.str("string value"); break;
    case GgufValueType::ARRAY: corrupt("nested array handled elsewhere");  // not reached
  }
}

// Reads (or, when `out` is null, skips) an array body: element type, count, elements.
void read_array(Reader &r, GgufValue *out, const std::string &key, int depth) {
  if (depth > kMaxArrayDepth) corrupt("arrays nested too deep in key '" + key + "'");
  uint32_t et = r.read<uint32_t>("array element type");
  if (!valid_value_type(et)) corrupt("unknown array element type " + std::to_string(et) + " in key '" + key + "'");
  uint64_t count = r.read<uint64_t>("array length");
  auto elem = static_cast<GgufValueType>(et);
  if (out != nullptr) {
    out->elem_type = elem;
    out->count = count;
  }
  if (elem == GgufValueType::STRING) {
    // each string costs at least its 8-byte length: reject counts the file cannot hold before reserving
    if (count > r.remaining() / 8) corrupt("array '" + key + "' claims " + std::to_string(count) + " strings, more than the file holds");
    if (out != nullptr) out->strings.reserve(static_cast<size_t>(count));
    for (uint64_t k = 0; k < count; ++k) {
      std::string_view s = r.str("array string");
      if (out != nullptr) out->strings.push_back(s);
    }
  } else if (elem == GgufValueType::ARRAY) {
    if (count > r.remaining() / 12) corrupt("array '" + key + "' claims " + std::to_string(count) + " arrays, more than the file holds");
    for (uint64_t k = 0; k < count; ++k) read_array(r, nullptr, key, depth + 1);
  } else {
    size_t es = scalar_size(elem);
    if (count > r.remaining() / es) corrupt("array '" + key + "' of " + std::to_string(count) + " elements runs past the end of the file");
    if (out != nullptr) out->raw = r.here();
    r.skip(count * es, "array elements");
  }
}

}  // namespace

const char *gguf_value_type_name(GgufValueType t) {
  static const char *names[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                "bool",  "string", "array", "uint64", "int64", "float64"};
  auto i = static_cast<uint32_t>(t);
  return i < sizeof(names) / sizeof(names[0]) ? names[i] : "unknown";
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufValueType::UINT8: case GgufValueType::INT8: case GgufValueType::UINT16: case GgufValueType::INT16:
    case GgufValueType::UINT32: case GgufValueType::INT32: case GgufValueType::UINT64: case GgufValueType::INT64:
      return true;
    default: return false;
  }
}

GgufFile::GgufFile(const std::string &path) : map_(path) {
  base_ = map_.data();
  size_ = map_.size();
  parse();
}

GgufFile::GgufFile(const uint8_t *data, size_t size) : base_(data), size_(size) { parse(); }

void GgufFile::parse() {
  Reader r(base_, size_);
  if (size_ < 4 || std::memcmp(base_, "GGUF", 4) != 0) fail(Status::bad_model, "not a GGUF file (wrong magic)");
  r.skip(4, "magic");
  version_ = r.read<uint32_t>("version");
  // GGUF has had versions 1 to 3 in ten years: 0 or anything past 255 is the magic followed by garbage (a damaged
  // or foreign file), not a newer format that a newer infokv could read.
  if (version_ == 0 || version_ > 255) fail(Status::bad_model, "not a GGUF file or damaged: version " + std::to_string(version_));
  if (version_ == 1) fail(Status::unsupported, "GGUF version 1 is not supported (re-convert the model to v3)");
  if (version_ != 2 && version_ != 3) fail(Status::unsupported, "unsupported GGUF version " + std::to_string(version_));
  uint64_t n_tensors = r.read<uint64_t>("tensor count");
  uint64_t n_kv = r.read<uint64_t>("metadata count");
  // A metadata pair takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at least 8 + 4 + 8 + 4 + 8.
  if (n_kv > r.remaining() / 13) corrupt("metadata count " + std::to_string(n_kv) + " exceeds what the file can hold");
  if (n_tensors > r.remaining() / 32) corrupt("tensor count " + std::to_string(n_tensors) + " exceeds what the file can hold");

  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key(r.str("metadata key", kMaxKeyLen));
    uint32_t t = r.read<uint32_t>("metadata type");
    if (!valid_value_type(t)) corrupt("unknown metadata type " + std::to_string(t) + " for key '" + key + "'");
    GgufValue v;
    v.type = static_cast<GgufValueType>(t);
    if (v.type == GgufValueType::ARRAY) {
      read_array(r, &v, key, 1);
    } else {
      read_scalar(r, v, key);
    }
    if (kv_.count(key) != 0) corrupt("duplicate metadata key '" + key + "'");
    kv_.emplace(std::move(key), std::move(v));
  }

  if (const GgufValue *a = find("general.alignment")) {
    // The GGUF spec requires a multiple of 8: that keeps every tensor naturally aligned for its element type in
    // the (page-aligned) mapping, which the kernels rely on when they read weights as float / half arrays.
    if (!a->is_integer() || a->u < 8 || a->u > (1u << 20) || (a->u & (a->u - 1)) != 0)
      corrupt("general.alignment must be a power of two from 8 to 1 MiB");
    alignment_ = static_cast<uint32_t>(a->u);
  }

  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensor t;
    t.name = std::string(r.str("tensor name", kMaxKeyLen));
    t.n_dims = r.read<uint32_t>("tensor dimension count");
    if (t.n_dims == 0 || t.n_dims > kMaxDims)
      corrupt("tensor '" + t.name + "' has " + std::to_string(t.n_dims) + " dimensions (1 to 4 allowed)");
    uint64_t n = 1;
    for (uint32_t d = 0; d < t.n_dims; ++d) {
      t.ne[d] = r.read<uint64_t>("tensor dimension");
      if (t.ne[d] == 0 || t.ne[d] > (uint64_t{1} << 40)) corrupt("tensor '" + t.name + "' has dimension " + std::to_string(t.ne[d]));
      if (n > std::numeric_limits<uint64_t>::max() / t.ne[d]) corrupt("tensor '" + t.name + "' element count overflows");
      n *= t.ne[d];
    }
    t.n_elements = n;
    t.type = r.read<uint32_t>("tensor type");
    t.offset = r.read<uint64_t>("tensor offset");
    GgmlTypeTraits tr = ggml_type_traits(t.type);
    if (tr.name == nullptr) corrupt("tensor '" + t.name + "' has unknown type " + std::to_string(t.type));
    if (t.ne[0] % tr.block_elems != 0)
      corrupt("tensor '" + t.name + "' row of " + std::to_string(t.ne[0]) + " elements is not a whole number of " + tr.name + " blocks");
    uint64_t blocks = n / tr.block_elems;
    if (blocks > std::numeric_limits<uint64_t>::max() / tr.block_bytes) corrupt("tensor '" + t.name + "' size overflows");
    t.n_bytes = blocks * tr.block_bytes;
    if (t.offset % alignment_ != 0) corrupt("tensor '" + t.name + "' offset is not aligned to " + std::to_string(alignment_));
    if (tensor_index_.count(t.name) != 0) corrupt("duplicate tensor '" + t.name + "'");
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  uint64_t data_start = (static_cast<uint64_t>(r.pos()) + alignment_ - 1) / alignment_ * alignment_;
  if (data_start > size_ && n_tensors > 0) corrupt("tensor data section starts past the end of the file");
  uint64_t data_size = data_start <= size_ ? size_ - data_start : 0;
  for (GgufTensor &t : tensors_) {
    if (t.offset > data_size || t.n_bytes > data_size - t.offset)
      corrupt("tensor '" + t.name + "' data (" + std::to_string(t.n_bytes) + " bytes at " + std::to_string(t.offset) +
              ") runs past the end of the file");
    t.data = base_ + data_start + t.offset;
  }
}

const GgufValue *GgufFile::find(const std::string &key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const GgufTensor *GgufFile::find_tensor(const std::string &name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::string GgufFile::get_string(const std::string &key, const std::string &fallback) const {
  const GgufValue *v = find(key);
  if (v == nullptr) return fallback;
  if (v->type != GgufValueType::STRING) corrupt("key '" + key + "' is " + gguf_value_type_name(v->type) + ", expected string");
  return std::string(v->s);
}

std::string GgufFile::get_string_req(const std::string &key) const {
  if (find(key) == nullptr) fail(Status::bad_model, "missing metadata key '" + key + "'");
  return get_string(key, "");
}

int64_t GgufFile::get_int(const std::string &key, int64_t fallback) const {
  const GgufValue *v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_integer()) corrupt("key '" + key + "' is " + gguf_value_type_name(v->type) + ", expected an integer");
  return v->i;
}

int64_t GgufFile::get_int_req(const std::string &key) const {
  if (find(key) == nullptr) fail(Status::bad_model, "missing metadata key '" + key + "'");
  return get_int(key, 0);
}

double GgufFile::get_float(const std::string &key, double fallback) const {
  const GgufValue *v = find(key);
  if (v == nullptr) return fallback;
  if (v->is_float()) return v->f;
  if (v->is_integer()) return static_cast<double>(v->i);
  corrupt("key '" + key + "' is " + gguf_value_type_name(v->type) + ", expected a number");
}

bool GgufFile::get_bool(const std::string &key, bool fallback) const {
  const GgufValue *v = find(key);
  if (v == nullptr) return fallback;
  if (v->type != GgufValueType::BOOL) corrupt("key '" + key + "' is " + gguf_value_type_name(v->type) + ", expected bool");
  return v->u != 0;
}

const GgufValue *GgufFile::get_array(const std::string &key, GgufValueType elem) const {
  const GgufValue *v = find(key);
  if (v == nullptr) return nullptr;
  if (v->type != GgufValueType::ARRAY || v->elem_type != elem)
    corrupt("key '" + key + "' is not an array of " + gguf_value_type_name(elem));
  return v;
}

}  // namespace infokv
