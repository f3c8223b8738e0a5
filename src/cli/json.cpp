#include "cli/json.hpp"

#include "util/json_escape.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace infokv {
namespace cli {

std::string json_str(const std::string &s) { return "\"" + json_escape(s) + "\""; }

std::string json_num(double v) {
  if (!std::isfinite(v)) return "null";
  char b[40];
  for (int prec = 6; prec <= 17; ++prec) {
    std::snprintf(b, sizeof b, "%.*g", prec, v);
    if (std::strtod(b, nullptr) == v) break;
  }
  return b;
}

JsonObject &JsonObject::raw(const std::string &key, const std::string &json) {
  if (!body_.empty()) body_ += ",";
  body_ += json_str(key) + ":" + json;
  return *this;
}

}  // namespace cli
}  // namespace infokv
