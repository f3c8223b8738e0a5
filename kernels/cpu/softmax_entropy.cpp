// Top-k entropy (one row and a batch of rows) and the per-layer representation change. CUDA twins:
// kernels/cuda/softmax_entropy.cu.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/ops.hpp"

namespace infokv {
namespace cpu {

namespace {

// The k-th largest of x[n] (0 < k < n): the smallest of a min-heap of the k largest seen so far. Values are checked 16
// at a time against the heap's smallest (a loop the compiler vectorises), and only a group holding a larger one
// touches the heap, so a pass costs little more than reading the row (n is the vocabulary, this runs per position;
// it replaced nth_element on a copy). Ties do not matter: the k-th largest value is the same whichever equal values
// fill the heap. NaNs never enter past the first k (x > thr is false for them).
float kth_largest(const float *x, int32_t n, int32_t k) {
  std::vector<float> heap(x, x + k);
  const auto greater = [](float a, float b) { return a > b; };
  std::make_heap(heap.begin(), heap.end(), greater);
  float thr = heap.front();
  constexpr int32_t kGroup = 16;
  for (int32_t i = k; i < n; i += kGroup) {
    const int32_t e = std::min(n, i + kGroup);
    bool any = false;
    for (int32_t j = i; j < e; ++j) any |= x[j] > thr;
    if (!any) continue;
    for (int32_t j = i; j < e; ++j) {
      if (!(x[j] > thr)) continue;
      std::pop_heap(heap.begin(), heap.end(), greater);
      heap.back() = x[j];
      std::push_heap(heap.begin(), heap.end(), greater);
      thr = heap.front();
    }
  }
  return thr;
}

}  // namespace

double topk_entropy(const float *logits, int32_t n, int32_t top_k) {
  // Only the top_k largest logits take part; find them with a threshold from a partial selection.
  if (n <= 0) return 0.0;
  int32_t k = (top_k <= 0 || top_k > n) ? n : top_k;
  float mx = logits[0];
  for (int32_t i = 1; i < n; ++i) mx = logits[i] > mx ? logits[i] : mx;
  float thr = -INFINITY;
  if (k < n) thr = kth_largest(logits, n, k);
  double z = 0, zl = 0;
  int32_t above = 0;
  for (int32_t i = 0; i < n; ++i) above += logits[i] > thr;
  int32_t ties_allowed = k - above;  // equal-to-threshold values admitted to make exactly k
  for (int32_t i = 0; i < n; ++i) {
    bool in = logits[i] > thr || (logits[i] == thr && ties_allowed-- > 0);
    if (!in) continue;
    double l = static_cast<double>(logits[i]) - mx;
    double e = std::exp(l);
    z += e;
    zl += e * l;
  }
  // H = log Z - E[l]
  return std::log(z) - zl / z;
}

void rep_change_rows(float *out, const float *hidden, int64_t n_layer, int64_t n, int64_t d) {
  const float *last = hidden + (n_layer - 1) * n * d;
  for (int64_t l = 0; l < n_layer; ++l)
    for (int64_t t = 0; t < n; ++t) {
      const float *a = hidden + (l * n + t) * d;
      const float *b = last + t * d;
      double ab = 0, aa = 0, bb = 0;
      for (int64_t e = 0; e < d; ++e) {
        ab += static_cast<double>(a[e]) * b[e];
        aa += static_cast<double>(a[e]) * a[e];
        bb += static_cast<double>(b[e]) * b[e];
      }
      const double c = (aa > 0 && bb > 0) ? ab / std::sqrt(aa * bb) : 1.0;
      out[l * n + t] = static_cast<float>(1.0 - c);
    }
}


void topk_entropy_rows(double *out, const float *logits, int64_t n_rows, int32_t n, int32_t top_k) {
  for (int64_t r = 0; r < n_rows; ++r) out[r] = topk_entropy(logits + r * n, n, top_k);
}

}  // namespace cpu
}  // namespace infokv
