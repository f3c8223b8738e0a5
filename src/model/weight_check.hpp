// Load-time checks of weight values. A NaN or Inf in a norm or in the token embedding turns every hidden state
// into NaN, and sampling then picks token 0 forever; refusing the model at load names the culprit instead. Only
// the norms and the embedding table are read in full: they are small (the embedding is one matrix) and every
// token's path goes through them, while a full scan of the projection matrices would cost seconds per GB.
#pragma once
#include <string>
#include <vector>

#include "model/model.hpp"

namespace infokv {

// Throws Error(bad_model) "tensor '<name>' holds a non-finite value (NaN) at element i" when v has a NaN or Inf.
void check_finite(const std::vector<float> &v, const std::string &name);

// Dequantises the matrix row by row (any weight_type_supported type) and throws Error(bad_model) naming the
// tensor and the first row (and its column) holding a NaN or Inf.
void check_finite_rows(const Weight &w);

}  // namespace infokv
