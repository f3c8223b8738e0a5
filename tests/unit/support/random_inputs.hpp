// Fresh random inputs for kernel tests on both devices: a seed drawn per run (printed; INFOKV_TEST_SEED replays it)
// and normal samples.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace infokv_test {

inline uint32_t test_seed() {
  const char *e = std::getenv("INFOKV_TEST_SEED");
  uint32_t s = e ? static_cast<uint32_t>(std::strtoul(e, nullptr, 10)) : std::random_device{}();
  std::printf("[seed] INFOKV_TEST_SEED=%u\n", s);
  return s;
}

inline std::vector<float> randn(size_t n, std::mt19937 &g, float sd = 1.0f) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (float &x : v) x = d(g);
  return v;
}

}  // namespace infokv_test
