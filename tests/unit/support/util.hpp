// Shared helpers of the unit tests: the stories260K paths, whole-file reads, self-deleting temp files, a GGUF
// re-writer (copy a parsed file through gguf_builder, optionally changing tensors) and float -> F16/BF16
// conversions written independently of kernels/fp16.hpp.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "gguf/gguf.hpp"
#include "support/gguf_builder.hpp"
#include "support/paths.hpp"
#include "util/error.hpp"

namespace infokv_test {

// Runs f and reports the status of the infokv::Error it throws (ok when it throws nothing), its message in *msg. Any
// other exception is a bug (the C shim would turn it into IKV_ERR_INTERNAL): reported as internal with its text.
template <typename F>
infokv::Status status_of(F &&f, std::string *msg = nullptr) {
  try {
    f();
  } catch (const infokv::Error &e) {
    if (msg != nullptr) *msg = e.what();
    return e.status();
  } catch (const std::exception &e) {
    if (msg != nullptr) *msg = std::string("non-infokv exception: ") + e.what();
    return infokv::Status::internal;
  }
  return infokv::Status::ok;
}

inline std::string stories_path() { return models_dir() + "/stories260K/stories260K.gguf"; }
inline std::string reference_json_path() { return models_dir() + "/stories260K/reference.json"; }

inline std::vector<uint8_t> read_bytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline std::string read_text(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The standard output of a shell command and its exit status as pclose() gives it (-1: it could not be started).
struct CommandOutput {
  std::string out;
  int status = -1;
};
inline CommandOutput run_command(const std::string &cmd) {
  CommandOutput r;
  FILE *p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  r.status = ::pclose(p);
  return r;
}

// A file in the temp directory holding the given bytes, removed when this object dies.
class TempFile {
 public:
  explicit TempFile(const std::vector<uint8_t> &bytes, const std::string &suffix = ".gguf") {
    std::string tmpl = (std::filesystem::temp_directory_path() / ("infokv_test_XXXXXX" + suffix)).string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    int fd = ::mkstemps(buf.data(), static_cast<int>(suffix.size()));
    if (fd < 0) throw std::runtime_error("mkstemps failed");
    path_ = buf.data();
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (w <= 0) {
        ::close(fd);
        throw std::runtime_error("write failed");
      }
      done += static_cast<size_t>(w);
    }
    ::close(fd);
  }
  ~TempFile() { std::remove(path_.c_str()); }
  TempFile(const TempFile &) = delete;
  TempFile &operator=(const TempFile &) = delete;
  const std::string &path() const { return path_; }

 private:
  std::string path_;
};

// The real model's bytes, read once. Empty when the file is missing: callers ASSERT on that (a missing file fails).
inline const std::vector<uint8_t> &stories_bytes() {
  static const std::vector<uint8_t> bytes = read_bytes(stories_path());
  return bytes;
}

#define REQUIRE_STORIES_BYTES()                                                                                   \
  ASSERT_FALSE(::infokv_test::stories_bytes().empty())                                                            \
      << "model file " << ::infokv_test::stories_path()                                                           \
      << " is missing or empty (set INFOKV_MODELS_DIR to the folder holding stories260K/)"

// ---- float conversions (independent of the library's) ----

// IEEE binary16, round to nearest even, via frexp/nearbyint (finite inputs below 65520 in magnitude).
inline uint16_t test_float_to_f16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (a == 0) return sign;
  int ex = 0;
  std::frexp(a, &ex);  // a = m * 2^ex, m in [0.5, 1)
  int e = ex - 1;      // a = 1.x * 2^e
  if (e < -14) {       // subnormal: units of 2^-24 (may round up to the smallest normal, encoded the same way)
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0)));
  }
  double q = std::nearbyint(std::ldexp(a, 10 - e));  // in [1024, 2048]
  if (q >= 2048) {
    q = 1024;
    ++e;
  }
  if (e + 15 >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  return static_cast<uint16_t>(sign | ((e + 15) << 10) | (static_cast<int>(q) - 1024));
}

inline uint16_t test_float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t upper = x >> 16, lower = x & 0xffffu;
  if (lower > 0x8000u || (lower == 0x8000u && (upper & 1u))) ++upper;
  return static_cast<uint16_t>(upper);
}

// ---- GGUF re-writing ----

// Serialises one parsed metadata value back into the payload add_raw expects (the bytes after the type field).
inline std::vector<uint8_t> gguf_value_payload(const infokv::GgufValue &v) {
  using T = infokv::GgufValueType;
  ByteWriter w;
  auto scalar = [&](T t, const infokv::GgufValue &s) {
    switch (t) {
      case T::UINT8: case T::BOOL: w.le<uint8_t>(static_cast<uint8_t>(s.u)); break;
      case T::INT8: w.le<int8_t>(static_cast<int8_t>(s.i)); break;
      case T::UINT16: w.le<uint16_t>(static_cast<uint16_t>(s.u)); break;
      case T::INT16: w.le<int16_t>(static_cast<int16_t>(s.i)); break;
      case T::UINT32: w.le<uint32_t>(static_cast<uint32_t>(s.u)); break;
      case T::INT32: w.le<int32_t>(static_cast<int32_t>(s.i)); break;
      case T::FLOAT32: w.le<float>(static_cast<float>(s.f)); break;
      case T::UINT64: w.le<uint64_t>(s.u); break;
      case T::INT64: w.le<int64_t>(s.i); break;
      case T::FLOAT64: w.le<double>(s.f); break;
      case T::STRING: w.str(std::string(s.s)); break;
      case T::ARRAY: throw std::runtime_error("nested arrays are not re-written");
    }
  };
  if (v.type != T::ARRAY) {
    scalar(v.type, v);
    return w.bytes;
  }
  w.le<uint32_t>(static_cast<uint32_t>(v.elem_type));
  w.le<uint64_t>(v.count);
  if (v.elem_type == T::STRING) {
    for (std::string_view s : v.strings) w.str(std::string(s));
  } else {
    static const size_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    w.raw(v.raw, static_cast<size_t>(v.count) * sizes[static_cast<uint32_t>(v.elem_type)]);
  }
  return w.bytes;
}

// What to do with one tensor when re-writing: change its name/type/shape/bytes, or drop it (return false).
struct TensorEdit {
  std::string name;
  uint32_t type;
  std::vector<uint64_t> ne;
  std::vector<uint8_t> data;
};
using TensorEditor = std::function<bool(TensorEdit &)>;
using MetaFilter = std::function<bool(const std::string &key)>;  // false: drop the key

// Copies `src` through GgufBuilder (metadata in key order, tensors in file order), applying the edits.
inline GgufBuilder rewrite_gguf(const infokv::GgufFile &src, const TensorEditor &edit = nullptr,
                                const MetaFilter &keep_key = nullptr) {
  GgufBuilder b;
  b.set_version(src.version()).set_alignment(src.alignment());
  for (const auto &kv : src.metadata()) {
    if (keep_key && !keep_key(kv.first)) continue;
    b.add_raw(kv.first, static_cast<uint32_t>(kv.second.type), gguf_value_payload(kv.second));
  }
  for (const infokv::GgufTensor &t : src.tensors()) {
    TensorEdit e{t.name, t.type, std::vector<uint64_t>(t.ne, t.ne + t.n_dims),
                 std::vector<uint8_t>(t.data, t.data + t.n_bytes)};
    if (edit && !edit(e)) continue;
    b.add_tensor(e.name, e.type, e.ne, e.data.data(), e.data.size());
  }
  return b;
}

// A tensor editor converting every F32 tensor to F16 (type 1) or BF16 (type 30).
inline TensorEditor convert_f32_to(uint32_t ggml_type) {
  return [ggml_type](TensorEdit &e) {
    if (e.type != 0) return true;
    const size_t n = e.data.size() / 4;
    std::vector<uint8_t> out(n * 2);
    for (size_t i = 0; i < n; ++i) {
      float f;
      std::memcpy(&f, e.data.data() + 4 * i, 4);
      uint16_t h = ggml_type == 1 ? test_float_to_f16(f) : test_float_to_bf16(f);
      out[2 * i] = static_cast<uint8_t>(h & 0xff);
      out[2 * i + 1] = static_cast<uint8_t>(h >> 8);
    }
    e.data = std::move(out);
    e.type = ggml_type;
    return true;
  };
}

}  // namespace infokv_test

#include "model/model.hpp"
#include "session/session.hpp"

namespace infokv_test {

// A fresh session with an f32 cache and its one sequence, `tokens` decoded into it as one batch (logits of the last).
struct Prefilled {
  std::unique_ptr<infokv::Session> s;
  int32_t seq = -1;
  const std::vector<float> &logits() const { return s->logits(seq); }
};

inline Prefilled prefill_f32(const std::shared_ptr<const infokv::Model> &model, const std::vector<int32_t> &tokens,
                             int32_t n_threads = 1) {
  infokv::SessionOptions o;
  o.kv_dtype = infokv::KvDtype::f32;
  o.n_threads = n_threads;
  Prefilled p;
  p.s = std::make_unique<infokv::Session>(model, o);
  p.seq = p.s->add_sequence();
  std::vector<infokv::BatchToken> batch;
  for (int32_t t : tokens) batch.push_back({p.seq, t, false});
  p.s->decode(batch);
  return p;
}

// Logits after each of `tokens` (decoded as one batch into a fresh session's sequence), [n_tokens][n_vocab].
inline std::vector<std::vector<float>> logits_per_position(const std::shared_ptr<const infokv::Model> &model,
                                                           const std::vector<int32_t> &tokens,
                                                           infokv::KvDtype dtype = infokv::KvDtype::f32,
                                                           int32_t n_threads = 2) {
  infokv::SessionOptions o;
  o.kv_dtype = dtype;
  o.n_threads = n_threads;
  infokv::Session s(model, o);
  const int32_t seq = s.add_sequence();
  std::vector<infokv::BatchToken> batch;
  for (int32_t t : tokens) batch.push_back({seq, t, true});
  s.decode(batch);
  const std::vector<float> &all = s.batch_logits();
  const size_t V = static_cast<size_t>(model->hparams().n_vocab);
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < tokens.size(); ++i) out.emplace_back(all.begin() + i * V, all.begin() + (i + 1) * V);
  return out;
}

}  // namespace infokv_test
