// A minimal streaming JSON writer for the CLI's --json output.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace infokv {
namespace cli {

std::string json_str(const std::string &s);  // quoted and escaped (invalid UTF-8 bytes become U+FFFD)
std::string json_num(double v);              // shortest round-tripping form; null for NaN/inf

class JsonObject {
 public:
  JsonObject &raw(const std::string &key, const std::string &json);
  JsonObject &str(const std::string &key, const std::string &v) { return raw(key, json_str(v)); }
  JsonObject &num(const std::string &key, double v) { return raw(key, json_num(v)); }
  JsonObject &integer(const std::string &key, int64_t v) { return raw(key, std::to_string(v)); }
  JsonObject &boolean(const std::string &key, bool v) { return raw(key, v ? "true" : "false"); }
  template <typename T> JsonObject &ints(const std::string &key, const std::vector<T> &v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
    return raw(key, s + "]");
  }
  std::string dump() const { return "{" + body_ + "}"; }

 private:
  std::string body_;
};

}  // namespace cli
}  // namespace infokv
