// JSON for test fixtures (reference.json, the transformers references, the CLI's --json output) as a plain tree with
// checked accessors that throw std::runtime_error naming what was missing.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "util/error.hpp"
#include "util/json_reader.hpp"

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

// The library's own strict reader (src/util/json_reader) parses; the tests see its tree as a Value.
inline Value from_reader(const infokv::JsonValue &j) {
  Value v;
  switch (j.kind()) {
    case infokv::JsonValue::Kind::null: break;
    case infokv::JsonValue::Kind::boolean: v.kind = Value::Kind::boolean; v.b = j.as_bool(); break;
    case infokv::JsonValue::Kind::number: v.kind = Value::Kind::number; v.num = j.as_number(); break;
    case infokv::JsonValue::Kind::string: v.kind = Value::Kind::string; v.str = j.as_string(); break;
    case infokv::JsonValue::Kind::array:
      v.kind = Value::Kind::array;
      for (const infokv::JsonValue &e : j.items()) v.arr.push_back(from_reader(e));
      break;
    case infokv::JsonValue::Kind::object:
      v.kind = Value::Kind::object;
      for (const auto &m : j.members()) v.obj.emplace(m.first, from_reader(m.second));
      break;
  }
  return v;
}

// Throws infokv::Error (a std::runtime_error) with the byte offset on malformed input.
inline Value parse(const std::string &text) {
  return from_reader(infokv::JsonValue::parse(text, static_cast<int32_t>(infokv::Status::bad_config), "test JSON"));
}

}  // namespace json
}  // namespace infokv_test
