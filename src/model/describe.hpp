#pragma once
#include <string>

#include "model/model.hpp"


namespace infokv {
// A JSON object describing the model: architecture, sizes, tokenizer, tensor types (counts per type).
std::string describe_json(const Model &m);
}  // namespace infokv
