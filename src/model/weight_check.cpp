#include "model/weight_check.hpp"

#include <cmath>
#include <cstdint>

#include "kernels/ops.hpp"
#include "util/error.hpp"

namespace infokv {

namespace {

// Index of the first NaN/Inf in x[n], or n. Summing x * 0 vectorises and is NaN iff some x[i] is NaN or Inf, so
// the clean case (every load of a good model) costs one pass without branches.
int64_t first_non_finite(const float *x, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc += x[i] * 0.0f;
  if (acc == 0.0f) return n;
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return i;
  return n;
}

const char *kind(float x) { return std::isnan(x) ? "NaN" : (x > 0 ? "+Inf" : "-Inf"); }

}  // namespace

void check_finite(const std::vector<float> &v, const std::string &name) {
  const int64_t n = static_cast<int64_t>(v.size());
  const int64_t i = first_non_finite(v.data(), n);
  if (i < n)
    fail(Status::bad_model, "tensor '" + name + "' holds a non-finite value (" + kind(v[static_cast<size_t>(i)]) +
                                ") at element " + std::to_string(i));
}

void check_finite_rows(const Weight &w) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    if (!cpu::get_row(row.data(), w.data, w.type, r, w.cols))
      fail(Status::unsupported, "cannot read the rows of tensor '" + w.name + "'");
    const int64_t c = first_non_finite(row.data(), w.cols);
    if (c < w.cols)
      fail(Status::bad_model, "tensor '" + w.name + "' holds a non-finite value (" + kind(row[static_cast<size_t>(c)]) +
                                  ") in row " + std::to_string(r) + " (column " + std::to_string(c) + ")");
  }
}

}  // namespace infokv
