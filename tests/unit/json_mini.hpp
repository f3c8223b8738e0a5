// A minimal JSON reader for test fixtures (reference.json): objects, arrays, strings (with \uXXXX escapes, BMP and
// surrogate pairs), numbers, true/false/null. Throws std::runtime_error with the offset on malformed input.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace infokv_test {
namespace json {

struct Value {
  enum class Kind { null, boolean, number, string, array, object } kind = Kind::null;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<Value> arr;
  std::map<std::string, Value> obj;

  const Value &operator[](const std::string &key) const {
    if (kind != Kind::object) throw std::runtime_error("json: not an object (looking up '" + key + "')");
    auto it = obj.find(key);
    if (it == obj.end()) throw std::runtime_error("json: missing key '" + key + "'");
    return it->second;
  }
  const Value &operator[](size_t i) const {
    if (kind != Kind::array) throw std::runtime_error("json: not an array");
    if (i >= arr.size()) throw std::runtime_error("json: index " + std::to_string(i) + " out of range");
    return arr[i];
  }
  size_t size() const { return kind == Kind::array ? arr.size() : kind == Kind::object ? obj.size() : 0; }
  double number() const {
    if (kind != Kind::number) throw std::runtime_error("json: not a number");
    return num;
  }
  int64_t integer() const { return static_cast<int64_t>(number()); }
  const std::string &string() const {
    if (kind != Kind::string) throw std::runtime_error("json: not a string");
    return str;
  }
  std::vector<double> numbers() const {
    std::vector<double> v;
    for (size_t i = 0; i < size(); ++i) v.push_back((*this)[i].number());
    return v;
  }
  std::vector<int32_t> ints() const {
    std::vector<int32_t> v;
    for (size_t i = 0; i < size(); ++i) v.push_back(static_cast<int32_t>((*this)[i].integer()));
    return v;
  }
};

class Parser {
 public:
  explicit Parser(const std::string &text) : s_(text) {}
  Value parse() {
    Value v = value(0);
    ws();
    if (i_ != s_.size()) err("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void err(const std::string &what) const {
    throw std::runtime_error("json: " + what + " at offset " + std::to_string(i_));
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) ++i_;
  }
  char peek() {
    ws();
    if (i_ >= s_.size()) err("unexpected end");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) err(std::string("expected '") + c + "'");
    ++i_;
  }
  bool literal(const char *lit) {
    size_t n = std::char_traits<char>::length(lit);
    if (s_.compare(i_, n, lit) == 0) {
      i_ += n;
      return true;
    }
    return false;
  }
  Value value(int depth) {
    if (depth > 64) err("nesting too deep");
    Value v;
    char c = peek();
    if (c == '{') {
      v.kind = Value::Kind::object;
      ++i_;
      if (peek() == '}') { ++i_; return v; }
      for (;;) {
        if (peek() != '"') err("expected a key");
        std::string k = string_body();
        expect(':');
        v.obj[k] = value(depth + 1);
        if (peek() == ',') { ++i_; continue; }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Value::Kind::array;
      ++i_;
      if (peek() == ']') { ++i_; return v; }
      for (;;) {
        v.arr.push_back(value(depth + 1));
        if (peek() == ',') { ++i_; continue; }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Value::Kind::string;
      v.str = string_body();
      return v;
    }
    if (literal("true")) { v.kind = Value::Kind::boolean; v.b = true; return v; }
    if (literal("false")) { v.kind = Value::Kind::boolean; return v; }
    if (literal("null")) return v;
    const char *start = s_.c_str() + i_;
    char *end = nullptr;
    v.num = std::strtod(start, &end);
    if (end == start) err("unexpected character");
    v.kind = Value::Kind::number;
    i_ += static_cast<size_t>(end - start);
    return v;
  }
  unsigned hex4() {
    if (i_ + 4 > s_.size()) err("short \\u escape");
    unsigned u = 0;
    for (int k = 0; k < 4; ++k) {
      char h = s_[i_++];
      u <<= 4;
      if (h >= '0' && h <= '9') u |= static_cast<unsigned>(h - '0');
      else if (h >= 'a' && h <= 'f') u |= static_cast<unsigned>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') u |= static_cast<unsigned>(h - 'A' + 10);
      else err("bad hex digit");
    }
    return u;
  }
  void utf8(std::string &out, uint32_t cp) {
    if (cp < 0x80) out += static_cast<char>(cp);
    else if (cp < 0x800) { out += static_cast<char>(0xC0 | (cp >> 6)); out += static_cast<char>(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  std::string string_body() {
    expect('"');
    std::string out;
    for (;;) {
      if (i_ >= s_.size()) err("unterminated string");
      char c = s_[i_++];
      if (c == '"') return out;
      if (c != '\\') { out += c; continue; }
      if (i_ >= s_.size()) err("unterminated escape");
      char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && s_.compare(i_, 2, "\\u") == 0) {
            i_ += 2;
            uint32_t lo = hex4();
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          utf8(out, cp);
          break;
        }
        default: err("bad escape");
      }
    }
  }

  const std::string &s_;
  size_t i_ = 0;
};

inline Value parse(const std::string &text) { return Parser(text).parse(); }

}  // namespace json
}  // namespace infokv_test
