#include "util/json_reader.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "util/error.hpp"

namespace infokv {

class JsonParser {
 public:
  JsonParser(std::string_view t, Status st, const std::string &what, int max_depth)
      : t_(t), st_(st), what_(what), max_depth_(max_depth) {}

  JsonValue document() {
    JsonValue v = value(0);
    ws();
    if (i_ != t_.size()) error("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void error(const std::string &msg) {
    fail(st_, what_ + ": " + msg + " at byte " + std::to_string(i_));
  }
  void ws() {
    while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\t' || t_[i_] == '\n' || t_[i_] == '\r')) ++i_;
  }
  bool lit(std::string_view s) {
    if (t_.compare(i_, s.size(), s) != 0) return false;
    i_ += s.size();
    return true;
  }

  JsonValue value(int depth) {
    if (depth > max_depth_) error("nesting deeper than " + std::to_string(max_depth_));
    ws();
    if (i_ >= t_.size()) error("unexpected end");
    JsonValue v;
    const char c = t_[i_];
    if (c == '{') {
      v.kind_ = JsonValue::Kind::object;
      ++i_;
      ws();
      if (i_ < t_.size() && t_[i_] == '}') { ++i_; return v; }
      while (true) {
        ws();
        if (i_ >= t_.size() || t_[i_] != '"') error("expected a string key");
        std::string key = string();
        ws();
        if (i_ >= t_.size() || t_[i_] != ':') error("expected ':'");
        ++i_;
        JsonValue member = value(depth + 1);
        if (v.index_.count(key) != 0) error("duplicate key '" + key + "'");
        v.index_.emplace(key, v.members_.size());
        v.members_.emplace_back(std::move(key), std::move(member));
        ws();
        if (i_ < t_.size() && t_[i_] == ',') { ++i_; continue; }
        if (i_ < t_.size() && t_[i_] == '}') { ++i_; return v; }
        error("expected ',' or '}'");
      }
    }
    if (c == '[') {
      v.kind_ = JsonValue::Kind::array;
      ++i_;
      ws();
      if (i_ < t_.size() && t_[i_] == ']') { ++i_; return v; }
      while (true) {
        v.items_.push_back(value(depth + 1));
        ws();
        if (i_ < t_.size() && t_[i_] == ',') { ++i_; continue; }
        if (i_ < t_.size() && t_[i_] == ']') { ++i_; return v; }
        error("expected ',' or ']'");
      }
    }
    if (c == '"') {
      v.kind_ = JsonValue::Kind::string;
      v.str_ = string();
      return v;
    }
    if (lit("true")) { v.kind_ = JsonValue::Kind::boolean; v.b_ = true; return v; }
    if (lit("false")) { v.kind_ = JsonValue::Kind::boolean; return v; }
    if (lit("null")) return v;
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    error("unexpected character");
  }

  JsonValue number() {
    const size_t start = i_;
    bool integral = true;
    if (t_[i_] == '-') ++i_;
    if (i_ >= t_.size() || !(t_[i_] >= '0' && t_[i_] <= '9')) error("bad number");
    if (t_[i_] == '0') ++i_;
    else while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9') ++i_;
    if (i_ < t_.size() && t_[i_] == '.') {
      integral = false;
      ++i_;
      if (i_ >= t_.size() || !(t_[i_] >= '0' && t_[i_] <= '9')) error("bad number");
      while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9') ++i_;
    }
    if (i_ < t_.size() && (t_[i_] == 'e' || t_[i_] == 'E')) {
      integral = false;
      ++i_;
      if (i_ < t_.size() && (t_[i_] == '+' || t_[i_] == '-')) ++i_;
      if (i_ >= t_.size() || !(t_[i_] >= '0' && t_[i_] <= '9')) error("bad number");
      while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9') ++i_;
    }
    const std::string s(t_.substr(start, i_ - start));
    JsonValue v;
    v.kind_ = JsonValue::Kind::number;
    v.num_ = std::strtod(s.c_str(), nullptr);
    if (!std::isfinite(v.num_)) error("number out of range");
    v.integral_ = integral;
    if (integral) {
      errno = 0;
      long long x = std::strtoll(s.c_str(), nullptr, 10);
      if (errno == 0) {
        v.is_int_ = true;
        v.int_ = x;
      }
    }
    return v;
  }

  uint32_t hex4() {
    if (i_ + 4 > t_.size()) error("bad \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = t_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else error("bad \\u escape");
    }
    return v;
  }

  static void put_utf8(std::string &o, uint32_t cp) {
    if (cp < 0x80) { o.push_back(static_cast<char>(cp)); }
    else if (cp < 0x800) { o.push_back(static_cast<char>(0xC0 | (cp >> 6))); o.push_back(static_cast<char>(0x80 | (cp & 0x3F))); }
    else if (cp < 0x10000) {
      o.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      o.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      o.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      o.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      o.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      o.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      o.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  std::string string() {
    ++i_;  // opening quote
    std::string o;
    while (true) {
      if (i_ >= t_.size()) error("unterminated string");
      const auto c = static_cast<uint8_t>(t_[i_]);
      if (c == '"') { ++i_; return o; }
      if (c < 0x20) error("control character in string");
      if (c == '\\') {
        ++i_;
        if (i_ >= t_.size()) error("unterminated string");
        const char e = t_[i_++];
        switch (e) {
          case '"': o.push_back('"'); break;
          case '\\': o.push_back('\\'); break;
          case '/': o.push_back('/'); break;
          case 'b': o.push_back('\b'); break;
          case 'f': o.push_back('\f'); break;
          case 'n': o.push_back('\n'); break;
          case 'r': o.push_back('\r'); break;
          case 't': o.push_back('\t'); break;
          case 'u': {
            uint32_t cp = hex4();
            if (cp >= 0xD800 && cp <= 0xDBFF) {
              if (!(i_ + 1 < t_.size() && t_[i_] == '\\' && t_[i_ + 1] == 'u')) error("lone surrogate");
              i_ += 2;
              const uint32_t lo = hex4();
              if (lo < 0xDC00 || lo > 0xDFFF) error("bad surrogate pair");
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
              error("lone surrogate");
            }
            put_utf8(o, cp);
            break;
          }
          default: error("bad escape");
        }
        continue;
      }
      // Raw UTF-8: copy one whole, valid character.
      size_t len = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
      if (len == 0 || i_ + len > t_.size()) error("invalid UTF-8 in string");
      const auto c1 = static_cast<uint8_t>(len > 1 ? t_[i_ + 1] : 0x80);
      uint8_t lo = 0x80, hi = 0xBF;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
      if (len > 1 && (c1 < lo || c1 > hi)) error("invalid UTF-8 in string");
      for (size_t k = 2; k < len; ++k)
        if ((static_cast<uint8_t>(t_[i_ + k]) & 0xC0) != 0x80) error("invalid UTF-8 in string");
      o.append(t_.data() + i_, len);
      i_ += len;
    }
  }

  std::string_view t_;
  Status st_;
  std::string what_;
  int max_depth_;
  size_t i_ = 0;
};

const JsonValue *JsonValue::find(std::string_view key) const {
  if (kind_ != Kind::object) return nullptr;
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &members_[it->second].second;
}

JsonValue JsonValue::parse(std::string_view text, int32_t status_code, const std::string &what, int max_depth) {
  return JsonParser(text, static_cast<Status>(status_code), what, max_depth).document();
}

}  // namespace infokv
