#include "gguf/gguf_writer.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "kernels/ggml_types.hpp"
#include "util/byte_io.hpp"
#include "util/error.hpp"

namespace infokv {

namespace {

template <typename T> void put(std::vector<uint8_t> &b, T v) {
  uint8_t tmp[sizeof(T)];
  std::memcpy(tmp, &v, sizeof(T));
  b.insert(b.end(), tmp, tmp + sizeof(T));
}
void put_str(std::vector<uint8_t> &b, const std::string &s) {
  put<uint64_t>(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}

enum : uint32_t { kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9 };

uint64_t elem_bytes(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::F32: return 4;
    case GgmlType::F16:
    case GgmlType::BF16: return 2;
    default: fail(Status::unsupported, "GgufWriter writes F32, F16 and BF16 tensors only");
  }
}

}  // namespace

void GgufWriter::add_string(const std::string &k, const std::string &v) {
  put_str(kv_, k); put<uint32_t>(kv_, kString); put_str(kv_, v); ++n_kv_;
}
void GgufWriter::add_u32(const std::string &k, uint32_t v) { put_str(kv_, k); put<uint32_t>(kv_, kU32); put(kv_, v); ++n_kv_; }
void GgufWriter::add_f32(const std::string &k, float v) { put_str(kv_, k); put<uint32_t>(kv_, kF32); put(kv_, v); ++n_kv_; }
void GgufWriter::add_bool(const std::string &k, bool v) {
  put_str(kv_, k); put<uint32_t>(kv_, kBool); put<uint8_t>(kv_, v ? 1 : 0); ++n_kv_;
}
void GgufWriter::add_string_array(const std::string &k, const std::vector<std::string> &v) {
  put_str(kv_, k); put<uint32_t>(kv_, kArray); put<uint32_t>(kv_, kString); put<uint64_t>(kv_, v.size());
  for (const auto &s : v) put_str(kv_, s);
  ++n_kv_;
}
void GgufWriter::add_f32_array(const std::string &k, const std::vector<float> &v) {
  put_str(kv_, k); put<uint32_t>(kv_, kArray); put<uint32_t>(kv_, kF32); put<uint64_t>(kv_, v.size());
  for (float f : v) put(kv_, f);
  ++n_kv_;
}
void GgufWriter::add_i32_array(const std::string &k, const std::vector<int32_t> &v) {
  put_str(kv_, k); put<uint32_t>(kv_, kArray); put<uint32_t>(kv_, kI32); put<uint64_t>(kv_, v.size());
  for (int32_t x : v) put(kv_, x);
  ++n_kv_;
}

void GgufWriter::add_tensor(const std::string &name, uint32_t type, const std::vector<uint64_t> &ne) {
  uint64_t n = 1;
  for (uint64_t d : ne) n *= d;
  tensors_.push_back(Tensor{name, type, ne, n, n * elem_bytes(type)});
}

uint64_t GgufWriter::data_bytes() const {
  uint64_t off = 0;
  for (const Tensor &t : tensors_) off = (off + t.n_bytes + alignment_ - 1) / alignment_ * alignment_;
  return off;
}

void GgufWriter::write(const std::string &path, const Fill &fill, const std::function<void(uint64_t, uint64_t)> &progress) const {
  std::vector<uint8_t> head;
  head.insert(head.end(), {'G', 'G', 'U', 'F'});
  put<uint32_t>(head, 3);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, n_kv_);
  head.insert(head.end(), kv_.begin(), kv_.end());
  uint64_t off = 0;
  for (const Tensor &t : tensors_) {
    put_str(head, t.name);
    put<uint32_t>(head, static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) put<uint64_t>(head, d);
    put<uint32_t>(head, t.type);
    put<uint64_t>(head, off);
    off = (off + t.n_bytes + alignment_ - 1) / alignment_ * alignment_;
  }
  head.resize((head.size() + alignment_ - 1) / alignment_ * alignment_, 0);

  // Through a temporary renamed over `path` at the end: a failure never leaves a partial file under `path`.
  FileSink f(path);
  f.write(head.data(), head.size());
  std::vector<std::pair<uint64_t, uint64_t>> sizes;
  for (const Tensor &t : tensors_) sizes.emplace_back(t.n_elements, elem_bytes(t.type));
  write_tensor_data(f, sizes, alignment_, fill, progress, data_bytes());
  f.commit();
}

}  // namespace infokv
