#include "model/safetensors_writer.hpp"

#include <algorithm>
#include <limits>

#include "util/byte_io.hpp"
#include "util/error.hpp"
#include "util/json_escape.hpp"

namespace infokv {

void SafetensorsWriter::add_metadata(const std::string &key, const std::string &value) { metadata_[key] = value; }

void SafetensorsWriter::add_tensor(const std::string &name, StDtype dtype, const std::vector<uint64_t> &shape) {
  if (name.empty() || name == "__metadata__") fail(Status::invalid_argument, "safetensors tensor name '" + name + "' is reserved");
  if (index_.count(name) != 0) fail(Status::invalid_argument, "safetensors tensor '" + name + "' added twice");
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  uint64_t n = 1;
  for (uint64_t d : shape) {
    if (d != 0 && n > max / d) fail(Status::invalid_argument, "safetensors tensor '" + name + "' size overflows");
    n *= d;
  }
  const uint64_t es = st_dtype_size(dtype);
  if (n > max / es || n * es > max - data_bytes_) fail(Status::invalid_argument, "safetensors tensor '" + name + "' size overflows");
  index_[name] = tensors_.size();
  tensors_.push_back(Tensor{name, dtype, shape, n, n * es});
  data_bytes_ += n * es;
}

std::string SafetensorsWriter::header() const {
  std::string h = "{";
  if (!metadata_.empty()) {
    h += "\"__metadata__\":{";
    bool first = true;
    for (const auto &[k, v] : metadata_) {
      h += (first ? "\"" : ",\"") + json_escape(k) + "\":\"" + json_escape(v) + "\"";
      first = false;
    }
    h += "}";
  }
  uint64_t off = 0;
  for (const Tensor &t : tensors_) {
    if (h.size() > 1) h += ",";
    h += "\"" + json_escape(t.name) + "\":{\"dtype\":\"" + st_dtype_name(t.dtype) + "\",\"shape\":[";
    for (size_t k = 0; k < t.shape.size(); ++k) h += (k ? "," : "") + std::to_string(t.shape[k]);
    h += "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + t.n_bytes) + "]}";
    off += t.n_bytes;
  }
  h += "}";
  h.resize((h.size() + 7) / 8 * 8, ' ');
  return h;
}

void SafetensorsWriter::write(const std::string &path, const Fill &fill, const std::function<void(uint64_t, uint64_t)> &progress) const {
  const std::string h = header();
  uint8_t len[8];
  for (int k = 0; k < 8; ++k) len[k] = static_cast<uint8_t>(static_cast<uint64_t>(h.size()) >> (8 * k));
  FileSink f(path);
  f.write(len, 8);
  f.write(h.data(), h.size());
  std::vector<std::pair<uint64_t, uint64_t>> sizes;
  for (const Tensor &t : tensors_) sizes.emplace_back(t.n_elements, st_dtype_size(t.dtype));
  write_tensor_data(f, sizes, 1, fill, progress, data_bytes_);
  f.commit();
}

}  // namespace infokv
