// Helpers of the tests that build or inspect a KV cache directly.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "kv/kv_cache.hpp"

namespace infokv_test {

// A cache configuration with f32 elements (exact values, so comparisons can be exact) and, unless given, as many
// query columns as the KV heads have (n_q_dim = n_kv_heads * head_dim).
inline infokv::KvConfig kv_config(int32_t n_layer, int32_t n_kv_heads, int32_t head_dim, int32_t block_size,
                                  int64_t n_blocks, int32_t n_q_dim = 0) {
  infokv::KvConfig c;
  c.n_layer = n_layer;
  c.n_kv_heads = n_kv_heads;
  c.head_dim = head_dim;
  c.n_q_dim = n_q_dim > 0 ? n_q_dim : n_kv_heads * head_dim;
  c.block_size = block_size;
  c.dtype = infokv::KvDtype::f32;
  c.n_blocks = n_blocks;
  return c;
}

// Every layer of the sequence still holds positions [begin, end) (a protected span survived compression).
inline void expect_positions_kept(const infokv::SeqCache &c, int32_t begin, int32_t end) {
  for (size_t l = 0; l < c.layers.size(); ++l) {
    const std::vector<int32_t> &pos = c.layers[l].pos;
    for (int32_t p = begin; p < end; ++p)
      EXPECT_TRUE(std::binary_search(pos.begin(), pos.end(), p)) << "layer " << l << " lost position " << p;
  }
}

}  // namespace infokv_test
