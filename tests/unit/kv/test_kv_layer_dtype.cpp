// Layers of one cache held in different dtypes (DESIGN §9 "How precisely"): blocks of equal bytes that hold more
// slots at a lower precision, a layer converted in place (rounded once, forks left intact, all or nothing), and
// compaction, appends and the block predictions over a cache whose layers differ.
#include <gtest/gtest.h>

#include <random>

#include "kernels/ops.hpp"
#include "kv/kv_cache.hpp"
#include "support/kv.hpp"
#include "support/random_inputs.hpp"
#include "util/error.hpp"

using namespace infokv;

namespace {

constexpr int32_t kLayers = 3, kHeads = 2, kHd = 64, kBs = 16;

KvConfig mixed_config(int64_t blocks, bool layer_dtypes = true) {
  KvConfig c = infokv_test::kv_config(kLayers, kHeads, kHd, kBs, blocks);
  c.dtype = KvDtype::f16;
  c.layer_dtypes = layer_dtypes;
  return c;
}

// Appends n slots of random K/V (positions after the sequence's end) to every layer of `id`.
void append_random(KvCache &kv, int32_t id, int32_t n, std::mt19937 &rng) {
  const int64_t len = kv.seq(id).length;
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(len) + i;
  const std::vector<int32_t> before = [&] {
    std::vector<int32_t> b;
    for (const LayerSlots &L : kv.seq(id).layers) b.push_back(L.n());
    return b;
  }();
  kv.append_slots(id, pos.data(), n);
  for (int32_t l = 0; l < kLayers; ++l) {
    const std::vector<float> k = infokv_test::randn(static_cast<size_t>(n) * kHeads * kHd, rng);
    const std::vector<float> v = infokv_test::randn(k.size(), rng);
    cpu::kv_append(kv.view(id, l), before[static_cast<size_t>(l)], k.data(), v.data(), n);
  }
}

// Every slot of a layer as f32: [slot][K, V][head][head_dim].
std::vector<float> read_layer(KvCache &kv, int32_t id, int32_t l) {
  const PagedKv view = kv.view(id, l);
  std::vector<float> out(static_cast<size_t>(view.n_slots) * 2 * kHeads * kHd);
  for (int32_t j = 0; j < view.n_slots; ++j)
    for (int which = 0; which < 2; ++which)
      for (int32_t h = 0; h < kHeads; ++h)
        cpu::kv_read(out.data() + ((static_cast<size_t>(j) * 2 + static_cast<size_t>(which)) * kHeads + static_cast<size_t>(h)) * kHd,
                     view, j, h, which);
  return out;
}

// What a layer read by read_layer() becomes at dtype dt: keys less `bias` rounded (where dt stores them so), values
// rounded, both read back as the cache reads them (keys still less the bias).
std::vector<float> rounded(const std::vector<float> &rows, KvDtype dt, const std::vector<float> &bias) {
  std::vector<float> out(rows.size()), tmp(static_cast<size_t>(kHd));
  std::vector<uint8_t> q(static_cast<size_t>(kv_bytes(dt, kHd)));
  for (size_t at = 0; at < rows.size(); at += kHd) {
    const size_t row = at / kHd;
    const bool key = (row / kHeads) % 2 == 0;
    const size_t h = row % kHeads;
    for (int32_t i = 0; i < kHd; ++i)
      tmp[static_cast<size_t>(i)] = rows[at + static_cast<size_t>(i)] - (key && kv_keys_less_bias(dt) && !bias.empty() ? bias[h * kHd + static_cast<size_t>(i)] : 0.0f);
    cpu::convert(q.data(), dt, reinterpret_cast<const uint8_t *>(tmp.data()), KvDtype::f32, kHd);
    cpu::convert(reinterpret_cast<uint8_t *>(out.data() + at), KvDtype::f32, q.data(), dt, kHd);
  }
  return out;
}

}  // namespace

TEST(KvLayerDtype, BlocksOfEqualBytesHoldMoreSlotsAtLowerPrecision) {
  KvCache kv(mixed_config(8));
  EXPECT_EQ(kv.slots_per_block(KvDtype::f16), kBs);
  EXPECT_EQ(kv.slots_per_block(KvDtype::q8_0), 30);  // 2 x 2 heads x 16 x 128 bytes / (2 x 2 x 68)
  EXPECT_EQ(kv.slots_per_block(KvDtype::q4_0), 56);
  EXPECT_EQ(kv.slots_per_block(KvDtype::f32), 8);
  KvCache one(mixed_config(8, false));  // a cache of one dtype (a device backend's)
  EXPECT_EQ(one.slots_per_block(KvDtype::f16), kBs);
  EXPECT_EQ(one.slots_per_block(KvDtype::q8_0), 0);
  KvConfig odd = mixed_config(8);
  odd.head_dim = 40;  // no whole quantised blocks
  KvCache o(odd);
  EXPECT_EQ(o.slots_per_block(KvDtype::q8_0), 0);
  EXPECT_EQ(o.slots_per_block(KvDtype::bf16), kBs);
  KvConfig tiny = mixed_config(8);
  tiny.dtype = KvDtype::q4_0;
  tiny.block_size = 1;
  KvCache t(tiny);
  EXPECT_EQ(t.slots_per_block(KvDtype::f32), 0);  // a 36-byte row does not fit a 256-byte one
}

TEST(KvLayerDtype, ConvertedLayerIsRoundedOnceAndItsForkKeepsItsRows) {
  std::mt19937 rng(infokv_test::test_seed());
  KvCache kv(mixed_config(64));
  kv.add(0);
  append_random(kv, 0, 37, rng);
  kv.fork(0, 1);
  const std::vector<float> bias = infokv_test::randn(static_cast<size_t>(kHeads) * kHd, rng, 3.0f);
  const std::vector<float> before = read_layer(kv, 0, 1), other = read_layer(kv, 0, 2);
  const int64_t free0 = kv.free_blocks();
  EXPECT_EQ(kv.blocks_holding(KvDtype::q8_0, 37), 2);  // 37 slots of 30 a block
  kv.convert_layer(0, 1, KvDtype::q8_0, bias);
  kv.check_invariants();
  EXPECT_EQ(kv.seq(0).layers[1].dtype, KvDtype::q8_0);
  EXPECT_EQ(kv.layer_block_size(0, 1), 30);
  EXPECT_EQ(kv.seq(0).layers[1].blocks.size(), 2u);
  EXPECT_EQ(kv.free_blocks(), free0 - 2);  // the old blocks are still the fork's
  EXPECT_EQ(read_layer(kv, 0, 1), rounded(before, KvDtype::q8_0, bias));
  EXPECT_EQ(read_layer(kv, 1, 1), before);  // the fork: untouched
  EXPECT_EQ(read_layer(kv, 0, 2), other);   // the other layers: untouched
  EXPECT_EQ(kv.seq(0).layers[1].pos, kv.seq(1).layers[1].pos);
  EXPECT_EQ(kv.view(0, 1).dtype, KvDtype::q8_0);
  EXPECT_EQ(kv.view(0, 1).block_size, 30);
  // The same dtype again: nothing to do.
  kv.convert_layer(0, 1, KvDtype::q8_0, bias);
  EXPECT_EQ(kv.free_blocks(), free0 - 2);
  // Removing the fork returns the layer's f16 blocks; removing both returns every block.
  kv.remove(1);
  kv.check_invariants();
  kv.remove(0);
  EXPECT_EQ(kv.free_blocks(), 64);
}

TEST(KvLayerDtype, ConversionWithoutRoomChangesNothing) {
  std::mt19937 rng(infokv_test::test_seed());
  KvCache kv(mixed_config(9));  // 3 layers x 3 blocks of 40 slots: no block free
  kv.add(0);
  append_random(kv, 0, 40, rng);
  ASSERT_EQ(kv.free_blocks(), 0);
  const std::vector<float> before = read_layer(kv, 0, 0);
  try {
    kv.convert_layer(0, 0, KvDtype::q8_0, {});
    FAIL() << "converted without a free block";
  } catch (const Error &e) {
    EXPECT_EQ(e.status(), Status::kv_full);
  }
  kv.check_invariants();
  EXPECT_EQ(kv.seq(0).layers[0].dtype, KvDtype::f16);
  EXPECT_EQ(read_layer(kv, 0, 0), before);
  EXPECT_EQ(kv.free_blocks(), 0);
  KvCache one(mixed_config(16, false));
  one.add(0);
  append_random(one, 0, 5, rng);
  try {
    one.convert_layer(0, 0, KvDtype::q8_0, {});
    FAIL() << "a cache of one dtype converted a layer";
  } catch (const Error &e) {
    EXPECT_EQ(e.status(), Status::unsupported);
  }
  one.check_invariants();
}

// Compaction, appends and their block predictions over layers of different dtypes: every kept slot keeps its
// values, and blocks_freed_by / blocks_needed(_after) with conversions match what the operations then take.
TEST(KvLayerDtype, CompactionAndAppendsOverMixedLayersKeepValuesAndPredictions) {
  std::mt19937 rng(infokv_test::test_seed());
  KvCache kv(mixed_config(256));
  kv.add(0);
  append_random(kv, 0, 95, rng);
  kv.convert_layer(0, 2, KvDtype::q8_0, {});
  kv.convert_layer(0, 1, KvDtype::q4_0, {});
  kv.check_invariants();
  std::vector<std::vector<float>> rows;
  for (int32_t l = 0; l < kLayers; ++l) rows.push_back(read_layer(kv, 0, l));
  // Keep a random subset per layer, and convert layer 0 to q8_0 with it.
  std::vector<std::vector<int32_t>> keep(kLayers);
  std::bernoulli_distribution coin(0.4);
  for (int32_t l = 0; l < kLayers; ++l)
    for (int32_t j = 0; j < 95; ++j)
      if (coin(rng)) keep[static_cast<size_t>(l)].push_back(j);
  const std::vector<KvDtype> dtypes = {KvDtype::q8_0, KvDtype::q4_0, KvDtype::q8_0};
  const int64_t free0 = kv.free_blocks();
  const int64_t predicted = kv.blocks_freed_by(0, keep, &dtypes);
  const int64_t need_after = kv.blocks_needed_after(0, keep, 40, &dtypes);
  kv.compact(0, keep);
  kv.convert_layer(0, 0, KvDtype::q8_0, {});
  kv.check_invariants();
  EXPECT_EQ(kv.free_blocks() - free0, predicted);
  EXPECT_EQ(kv.blocks_needed({0}, {40}), need_after);
  const size_t slot = 2 * kHeads * kHd;
  for (int32_t l = 0; l < kLayers; ++l) {
    const std::vector<float> got = read_layer(kv, 0, l);
    std::vector<float> want;
    for (int32_t j : keep[static_cast<size_t>(l)])
      want.insert(want.end(), rows[static_cast<size_t>(l)].begin() + static_cast<std::ptrdiff_t>(j * slot),
                  rows[static_cast<size_t>(l)].begin() + static_cast<std::ptrdiff_t>((j + 1) * slot));
    if (l == 0) want = rounded(want, KvDtype::q8_0, {});
    EXPECT_EQ(got, want) << "layer " << l;
  }
  // Appends: the prediction holds and new rows land in each layer's dtype.
  const int64_t free1 = kv.free_blocks();
  append_random(kv, 0, 40, rng);
  kv.check_invariants();
  EXPECT_EQ(free1 - kv.free_blocks(), need_after);
  for (int32_t l = 0; l < kLayers; ++l)
    EXPECT_EQ(kv.seq(0).layers[static_cast<size_t>(l)].n(), static_cast<int32_t>(keep[static_cast<size_t>(l)].size()) + 40);
  // A fork's append copies the shared last block of each layer in that layer's geometry.
  kv.fork(0, 1);
  EXPECT_EQ(kv.blocks_needed_fork(0, 7), kv.blocks_needed({1}, {7}));
  const int64_t free2 = kv.free_blocks();
  append_random(kv, 1, 7, rng);
  kv.check_invariants();
  EXPECT_EQ(free2 - kv.free_blocks(), kv.blocks_needed_fork(0, 7));
  kv.remove(0);
  kv.remove(1);
  EXPECT_EQ(kv.free_blocks(), 256);
}
