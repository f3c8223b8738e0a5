#include "model/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "util/error.hpp"
#include "util/json_reader.hpp"

namespace infokv {

namespace {

// Headers of real checkpoints are a few hundred KiB; the reference implementation refuses more than 100 MB.
constexpr uint64_t kMaxHeader = 100u << 20;

bool parse_dtype(const std::string &s, StDtype *out) {
  static const std::pair<const char *, StDtype> names[] = {
      {"F32", StDtype::F32}, {"F16", StDtype::F16}, {"BF16", StDtype::BF16}, {"F64", StDtype::F64},
      {"I64", StDtype::I64}, {"I32", StDtype::I32}, {"I16", StDtype::I16}, {"I8", StDtype::I8},
      {"U8", StDtype::U8},   {"BOOL", StDtype::BOOL}};
  for (const auto &n : names)
    if (s == n.first) {
      *out = n.second;
      return true;
    }
  return false;
}

}  // namespace

const char *st_dtype_name(StDtype t) {
  switch (t) {
    case StDtype::F32: return "F32";
    case StDtype::F16: return "F16";
    case StDtype::BF16: return "BF16";
    case StDtype::F64: return "F64";
    case StDtype::I64: return "I64";
    case StDtype::I32: return "I32";
    case StDtype::I16: return "I16";
    case StDtype::I8: return "I8";
    case StDtype::U8: return "U8";
    case StDtype::BOOL: return "BOOL";
  }
  return "?";
}

size_t st_dtype_size(StDtype t) {
  switch (t) {
    case StDtype::F64: case StDtype::I64: return 8;
    case StDtype::F32: case StDtype::I32: return 4;
    case StDtype::F16: case StDtype::BF16: case StDtype::I16: return 2;
    case StDtype::I8: case StDtype::U8: case StDtype::BOOL: return 1;
  }
  return 1;
}

SafetensorsFile::SafetensorsFile(const std::string &path) : file_(path) { parse(file_.data(), file_.size(), path); }

SafetensorsFile::SafetensorsFile(const uint8_t *bytes, size_t size, const std::string &what) { parse(bytes, size, what); }

const StTensor *SafetensorsFile::find(const std::string &name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::parse(const uint8_t *bytes, size_t size, const std::string &what) {
  auto bad = [&](const std::string &msg) { fail(Status::bad_model, what + ": " + msg); };
  if (size < 8) bad("file of " + std::to_string(size) + " bytes is too short for a safetensors header");
  uint64_t hlen = 0;
  for (int k = 7; k >= 0; --k) hlen = (hlen << 8) | bytes[k];
  if (hlen > kMaxHeader) bad("header length " + std::to_string(hlen) + " exceeds the 100 MiB limit");
  if (hlen > size - 8) bad("header length " + std::to_string(hlen) + " runs past the end of the file");
  if (hlen < 2) bad("empty header");
  const std::string_view header(reinterpret_cast<const char *>(bytes + 8), static_cast<size_t>(hlen));
  const JsonValue root = JsonValue::parse(header, static_cast<int32_t>(Status::bad_model), what + " header");
  if (!root.is_object()) bad("header is not a JSON object");
  const uint8_t *data = bytes + 8 + hlen;
  const uint64_t data_size = size - 8 - hlen;

  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const auto &[name, v] : root.members()) {
    if (name == "__metadata__") {
      if (!v.is_object()) bad("__metadata__ is not an object");
      for (const auto &[k, mv] : v.members()) {
        if (!mv.is_string()) bad("__metadata__ value '" + k + "' is not a string");
        metadata_[k] = mv.as_string();
      }
      continue;
    }
    if (!v.is_object()) bad("tensor '" + name + "' is not an object");
    const JsonValue *dt = v.find("dtype"), *shape = v.find("shape"), *offs = v.find("data_offsets");
    if (dt == nullptr || !dt->is_string()) bad("tensor '" + name + "' has no dtype string");
    if (shape == nullptr || !shape->is_array()) bad("tensor '" + name + "' has no shape array");
    if (offs == nullptr || !offs->is_array() || offs->items().size() != 2) bad("tensor '" + name + "' needs data_offsets [begin, end]");
    StTensor t;
    t.name = name;
    if (!parse_dtype(dt->as_string(), &t.dtype))
      fail(Status::unsupported, what + ": tensor '" + name + "' has dtype '" + dt->as_string() + "', which infokv does not read");
    if (shape->items().size() > 8) bad("tensor '" + name + "' has more than 8 dimensions");
    uint64_t n = 1;
    for (const JsonValue &d : shape->items()) {
      if (!d.is_integer() || d.as_int() < 0) bad("tensor '" + name + "' has a dimension that is not a non-negative integer");
      const auto dim = static_cast<uint64_t>(d.as_int());
      if (dim != 0 && n > std::numeric_limits<uint64_t>::max() / dim) bad("tensor '" + name + "' size overflows");
      n *= dim;
      t.shape.push_back(dim);
    }
    const size_t es = st_dtype_size(t.dtype);
    if (n > std::numeric_limits<uint64_t>::max() / es) bad("tensor '" + name + "' size overflows");
    t.n_elements = n;
    t.n_bytes = n * es;
    for (const JsonValue &o : offs->items())
      if (!o.is_integer() || o.as_int() < 0) bad("tensor '" + name + "' has a data offset that is not a non-negative integer");
    const auto b = static_cast<uint64_t>(offs->items()[0].as_int()), e = static_cast<uint64_t>(offs->items()[1].as_int());
    if (b > e || e > data_size)
      bad("tensor '" + name + "' data_offsets [" + std::to_string(b) + ", " + std::to_string(e) + "] lie outside the " +
          std::to_string(data_size) + " data bytes");
    if (e - b != t.n_bytes)
      bad("tensor '" + name + "' holds " + std::to_string(e - b) + " bytes but its shape and dtype need " + std::to_string(t.n_bytes));
    t.data = data + b;
    if (e > b) spans.emplace_back(b, e);
    index_[name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }
  std::sort(spans.begin(), spans.end());
  for (size_t k = 1; k < spans.size(); ++k)
    if (spans[k].first < spans[k - 1].second) bad("two tensors overlap in the data section");
}

}  // namespace infokv
