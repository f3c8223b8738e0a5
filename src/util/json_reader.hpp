// A strict, bounded JSON reader (RFC 8259) for the metadata of Hugging Face checkpoints (safetensors headers,
// config.json, tokenizer.json). Hostile input is the normal case: depth, sizes and numbers are limited, strings
// must be valid UTF-8, and every error is an exception with the byte offset, never undefined behaviour.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace infokv {

class JsonValue {
 public:
  enum class Kind { null, boolean, number, string, array, object };

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::null; }
  bool is_bool() const { return kind_ == Kind::boolean; }
  bool is_number() const { return kind_ == Kind::number; }
  bool is_string() const { return kind_ == Kind::string; }
  bool is_array() const { return kind_ == Kind::array; }
  bool is_object() const { return kind_ == Kind::object; }

  bool as_bool() const { return b_; }
  double as_number() const { return num_; }
  // True when the number was written as an integer (no fraction or exponent) that fits int64.
  bool is_integer() const { return kind_ == Kind::number && is_int_; }
  int64_t as_int() const { return int_; }
  // True when the number was written without a fraction or exponent, whatever its size (e.g. a uint64 above
  // INT64_MAX, for which is_integer() is false).
  bool is_integral_literal() const { return kind_ == Kind::number && integral_; }
  const std::string &as_string() const { return str_; }
  const std::vector<JsonValue> &items() const { return items_; }
  // Object members in file order (duplicate keys are rejected by the parser).
  const std::vector<std::pair<std::string, JsonValue>> &members() const { return members_; }
  // Member `key`, or nullptr (also for a non-object).
  const JsonValue *find(std::string_view key) const;

  // Parses a whole document. Throws Error(status) with "what: message at byte N" on any error.
  static JsonValue parse(std::string_view text, int32_t status_code, const std::string &what, int max_depth = 64);

 private:
  friend class JsonParser;
  Kind kind_ = Kind::null;
  bool b_ = false;
  bool is_int_ = false;
  bool integral_ = false;
  double num_ = 0;
  int64_t int_ = 0;
  std::string str_;
  std::vector<JsonValue> items_;
  std::vector<std::pair<std::string, JsonValue>> members_;
  std::map<std::string, size_t, std::less<>> index_;  // objects: key -> position in members_
};

}  // namespace infokv
