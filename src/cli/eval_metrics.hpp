// Distribution comparisons for `infokv eval`.
#pragma once
#include <cstdint>

namespace infokv {
namespace cli {
double log_prob(const float *logits, int32_t n, int32_t target);
// KL(p || q) in nats between softmax(p_logits) and softmax(q_logits).
double kl_divergence(const float *p_logits, const float *q_logits, int32_t n);
int32_t argmax(const float *v, int32_t n);
}  // namespace cli
}  // namespace infokv
