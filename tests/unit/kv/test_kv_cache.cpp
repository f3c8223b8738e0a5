// The paged KV cache against a simple model of it: thousands of random operation sequences (add, fork, append,
// truncate, remove, compact, remove a range) with every invariant and every stored value checked after each step.
#include <gtest/gtest.h>

#include <unistd.h>

#include <map>
#include <random>

#include "compress/channels.hpp"
#include "kv/kv_cache.hpp"
#include "support/kv.hpp"
#include "util/error.hpp"
#include "support/random_inputs.hpp"

using namespace infokv;

namespace {

KvConfig small_config(int64_t blocks, int32_t block_size) { return infokv_test::kv_config(3, 2, 4, block_size, blocks); }

// The model: per sequence and layer, the (position, tag) of each kept slot; the stored K element i of head h is
// tag + 0.01 * h + 0.001 * i, and V is its negation.
struct ModelSeq {
  int64_t length = 0;
  std::vector<std::vector<std::pair<int32_t, float>>> layers;
};

void write_slots(KvCache &kv, int32_t id, int32_t layer, int32_t first, const std::vector<float> &tags) {
  const KvConfig &c = kv.config();
  const int64_t row = int64_t{c.n_kv_heads} * c.head_dim;
  std::vector<float> k(tags.size() * static_cast<size_t>(row)), v(k.size());
  for (size_t t = 0; t < tags.size(); ++t)
    for (int32_t h = 0; h < c.n_kv_heads; ++h)
      for (int32_t i = 0; i < c.head_dim; ++i) {
        const float val = tags[t] + 0.01f * h + 0.001f * i;
        k[t * static_cast<size_t>(row) + static_cast<size_t>(h * c.head_dim + i)] = val;
        v[t * static_cast<size_t>(row) + static_cast<size_t>(h * c.head_dim + i)] = -val;
      }
  cpu::kv_append(kv.view(id, layer), first, k.data(), v.data(), static_cast<int64_t>(tags.size()));
}

void expect_matches(KvCache &kv, const std::map<int32_t, ModelSeq> &model, const std::string &where) {
  kv.check_invariants();
  const KvConfig &c = kv.config();
  std::vector<float> buf(static_cast<size_t>(c.head_dim));
  for (const auto &ms : model) {
    const SeqCache &s = kv.seq(ms.first);
    ASSERT_EQ(s.length, ms.second.length) << where;
    for (int32_t l = 0; l < c.n_layer; ++l) {
      const auto &exp = ms.second.layers[static_cast<size_t>(l)];
      const LayerSlots &L = s.layers[static_cast<size_t>(l)];
      ASSERT_EQ(L.n(), static_cast<int32_t>(exp.size())) << where << " seq " << ms.first << " layer " << l;
      PagedKv view = kv.view(ms.first, l);
      for (size_t j = 0; j < exp.size(); ++j) {
        ASSERT_EQ(L.pos[j], exp[j].first) << where;
        ASSERT_EQ(L.channels[kChanAttnSum][j], exp[j].second) << where << ": slot channel not moved with its slot";
        for (int32_t h = 0; h < c.n_kv_heads; ++h) {
          cpu::kv_read(buf.data(), view, static_cast<int32_t>(j), h, 0);
          for (int32_t i = 0; i < c.head_dim; ++i)
            ASSERT_EQ(buf[static_cast<size_t>(i)], exp[j].second + 0.01f * h + 0.001f * i)
                << where << " seq " << ms.first << " layer " << l << " slot " << j;
          cpu::kv_read(buf.data(), view, static_cast<int32_t>(j), h, 1);
          ASSERT_EQ(buf[0], -(exp[j].second + 0.01f * h)) << where;
        }
      }
    }
  }
  ASSERT_EQ(kv.sequence_ids().size(), model.size());
}

}  // namespace

TEST(KvCache, RandomOperationsKeepEveryInvariant) {
  std::mt19937 rng(infokv_test::test_seed());
  for (int round = 0; round < 20; ++round) {
    const int32_t bs = 1 + static_cast<int32_t>(rng() % 6);
    KvCache kv(small_config(40 + rng() % 40, bs));
    std::map<int32_t, ModelSeq> model;
    int32_t next_id = 0;
    float next_tag = 1.0f;
    for (int step = 0; step < 250; ++step) {
      const std::string where = "round " + std::to_string(round) + " step " + std::to_string(step);
      const int op = static_cast<int>(rng() % 8);
      std::vector<int32_t> ids;
      for (const auto &m : model) ids.push_back(m.first);
      const int32_t pick = ids.empty() ? -1 : ids[rng() % ids.size()];
      if (op == 0 || ids.empty()) {
        kv.add(next_id);
        model[next_id].layers.resize(3);
        ++next_id;
      } else if (op == 1) {
        kv.fork(pick, next_id);
        model[next_id] = model[pick];
        ++next_id;
      } else if (op <= 3) {
        const int32_t n = 1 + static_cast<int32_t>(rng() % 9);
        ModelSeq &m = model[pick];
        std::vector<int32_t> pos(static_cast<size_t>(n));
        for (int32_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(m.length + i);
        const int64_t need = kv.blocks_needed({pick}, {n});
        if (need > kv.free_blocks()) {
          EXPECT_THROW(kv.append_slots(pick, pos.data(), n), Error) << where;
        } else {
          kv.append_slots(pick, pos.data(), n);
          for (int32_t l = 0; l < 3; ++l) {
            std::vector<float> tags;
            for (int32_t i = 0; i < n; ++i) tags.push_back(next_tag++);
            LayerSlots &L = kv.seq_mut(pick).layers[static_cast<size_t>(l)];
            const int32_t first = L.n() - n;
            write_slots(kv, pick, l, first, tags);
            for (int32_t i = 0; i < n; ++i) {
              L.channels[kChanAttnSum][static_cast<size_t>(first + i)] = tags[static_cast<size_t>(i)];
              m.layers[static_cast<size_t>(l)].push_back({pos[static_cast<size_t>(i)], tags[static_cast<size_t>(i)]});
            }
          }
          m.length += n;
        }
      } else if (op == 4) {
        ModelSeq &m = model[pick];
        const int64_t len = m.length == 0 ? 0 : static_cast<int64_t>(rng() % static_cast<uint32_t>(m.length + 1));
        kv.truncate(pick, len);
        m.length = len;
        for (auto &L : m.layers)
          while (!L.empty() && L.back().first >= len) L.pop_back();
      } else if (op == 5) {
        kv.remove(pick);
        model.erase(pick);
      } else if (op == 6) {
        ModelSeq &m = model[pick];
        std::vector<std::vector<int32_t>> keep(3);
        for (int32_t l = 0; l < 3; ++l) {
          auto &L = m.layers[static_cast<size_t>(l)];
          std::vector<std::pair<int32_t, float>> kept;
          for (size_t j = 0; j < L.size(); ++j)
            if (rng() % 3 != 0) {
              keep[static_cast<size_t>(l)].push_back(static_cast<int32_t>(j));
              kept.push_back(L[j]);
            }
          L.swap(kept);
        }
        const ModelSeq backup = m;
        try {
          kv.compact(pick, keep);
        } catch (const Error &e) {
          ASSERT_EQ(e.status(), Status::kv_full) << where;  // allowed only when copy-on-write lacks blocks
          // nothing changed: restore the model's view from the cache's unchanged state
          m.layers.clear();
          const SeqCache &s = kv.seq(pick);
          for (const LayerSlots &L : s.layers) {
            std::vector<std::pair<int32_t, float>> v;
            for (int32_t j = 0; j < L.n(); ++j) v.push_back({L.pos[static_cast<size_t>(j)], L.channels[kChanAttnSum][static_cast<size_t>(j)]});
            m.layers.push_back(v);
          }
        }
      } else {
        ModelSeq &m = model[pick];
        const int64_t p0 = static_cast<int64_t>(rng() % static_cast<uint32_t>(m.length + 1));
        const int64_t p1 = p0 + static_cast<int64_t>(rng() % 5);
        try {
          kv.remove_range(pick, p0, p1);
          for (auto &L : m.layers) {
            std::vector<std::pair<int32_t, float>> kept;
            for (auto &e : L)
              if (e.first < p0 || e.first >= p1) kept.push_back(e);
            L.swap(kept);
          }
        } catch (const Error &e) {
          ASSERT_EQ(e.status(), Status::kv_full) << where;
        }
      }
      expect_matches(kv, model, where);
    }
    for (const auto &m : model) kv.remove(m.first);
    kv.check_invariants();
    EXPECT_EQ(kv.stats().blocks_used, 0) << "blocks leaked";
  }
}

TEST(KvCache, ForkSharesBlocksAndCopiesOnWrite) {
  KvCache kv(small_config(64, 4));
  kv.add(0);
  std::vector<int32_t> pos{0, 1, 2, 3, 4, 5};
  kv.append_slots(0, pos.data(), 6);
  for (int32_t l = 0; l < 3; ++l) write_slots(kv, 0, l, 0, {1, 2, 3, 4, 5, 6});
  const int64_t used = kv.stats().blocks_used;
  EXPECT_EQ(used, 3 * 2);
  // What a fork will need, counted before it exists, is what it needs once it does (for 0, 1, 2 and 5 tokens).
  std::vector<int64_t> before;
  for (int32_t n : {0, 1, 2, 5}) before.push_back(kv.blocks_needed_fork(0, n));
  kv.fork(0, 1);
  std::vector<int64_t> after;
  for (int32_t n : {0, 1, 2, 5}) after.push_back(kv.blocks_needed({1}, {n}));
  EXPECT_EQ(before, after);
  EXPECT_EQ(before, (std::vector<int64_t>{0, 3, 3, 6}));
  EXPECT_EQ(kv.stats().blocks_used, used) << "a fork must share, not copy";
  EXPECT_EQ(kv.refcount(kv.seq(0).layers[0].blocks[0]), 2);
  // Appending to the fork copies its partly filled last block (once per layer), not the full one.
  EXPECT_EQ(kv.blocks_needed({1}, {1}), 3);
  int32_t p = 6;
  kv.append_slots(1, &p, 1);
  EXPECT_EQ(kv.stats().blocks_used, used + 3);
  EXPECT_EQ(kv.seq(0).layers[0].blocks[0], kv.seq(1).layers[0].blocks[0]);
  EXPECT_NE(kv.seq(0).layers[0].blocks[1], kv.seq(1).layers[0].blocks[1]);
  kv.check_invariants();
  kv.remove(0);
  kv.remove(1);
  EXPECT_EQ(kv.stats().blocks_used, 0);
}

TEST(KvCache, CompactionReturnsBlocksToThePool) {
  KvCache kv(small_config(64, 4));
  kv.add(0);
  std::vector<int32_t> pos(16);
  for (int32_t i = 0; i < 16; ++i) pos[static_cast<size_t>(i)] = i;
  kv.append_slots(0, pos.data(), 16);
  EXPECT_EQ(kv.stats().blocks_used, 12);
  kv.compact(0, {{0, 5, 15}, {1, 2, 3, 4, 5}, {}});
  EXPECT_EQ(kv.stats().blocks_used, 1 + 2 + 0);
  EXPECT_EQ(kv.seq(0).layers[0].pos, (std::vector<int32_t>{0, 5, 15}));
  EXPECT_EQ(kv.seq(0).length, 16) << "compaction must not change the logical length";
  kv.check_invariants();
}

TEST(KvCache, RejectsBadArguments) {
  KvCache kv(small_config(8, 4));
  kv.add(0);
  EXPECT_THROW(kv.add(0), Error);
  EXPECT_THROW(kv.remove(7), Error);
  EXPECT_THROW(kv.truncate(0, 3), Error);
  EXPECT_THROW(kv.compact(0, {{}, {}}), Error);
  std::vector<int32_t> pos{0, 1};
  kv.append_slots(0, pos.data(), 2);
  EXPECT_THROW(kv.compact(0, {{1, 0}, {}, {}}), Error) << "keep lists must ascend";
  EXPECT_THROW(kv.compact(0, {{5}, {}, {}}), Error);
  KvConfig bad = small_config(0, 4);
  EXPECT_THROW(KvCache{bad}, Error);
}

// Blocks freed by compaction or removal give their pages back to the operating system (the host store zero-fills
// them, MADV_DONTNEED), so that compression lowers the process's memory, not only the pool's accounting; blocks
// still in use keep their bytes.
TEST(KvCacheMemory, FreedBlocksReturnTheirPages) {
  KvCache kv(infokv_test::kv_config(1, 1, 64, 8, 16));  // f32: 2 x 8 x 64 x 4 bytes, one 4 KiB page a block
  if (kv.block_bytes() % ::sysconf(_SC_PAGESIZE) != 0) GTEST_SKIP() << "page size is not a divisor of 4 KiB";
  kv.add(0);
  std::vector<int32_t> pos(80);
  for (int32_t i = 0; i < 80; ++i) pos[static_cast<size_t>(i)] = i;
  kv.append_slots(0, pos.data(), 80);
  const std::vector<int32_t> blocks = kv.seq(0).layers[0].blocks;
  ASSERT_EQ(blocks.size(), 10u);
  std::vector<uint8_t> fill(blocks.size() * static_cast<size_t>(kv.block_bytes()), 0xab);
  kv.store().write_blocks(blocks, fill.data());
  std::vector<std::vector<int32_t>> keep(1);
  for (int32_t j = 0; j < 8; ++j) keep[0].push_back(j);  // the first block stays where it is
  kv.compact(0, keep);
  std::vector<uint8_t> got(static_cast<size_t>(kv.block_bytes()));
  kv.store().read_blocks({blocks[0]}, got.data());
  EXPECT_EQ(got, std::vector<uint8_t>(got.size(), 0xab)) << "a kept block lost its bytes";
  for (size_t b = 1; b < blocks.size(); ++b) {
    kv.store().read_blocks({blocks[b]}, got.data());
    EXPECT_EQ(got, std::vector<uint8_t>(got.size(), 0)) << "freed block " << blocks[b] << " still holds its pages";
  }
  kv.remove(0);
  kv.store().read_blocks({blocks[0]}, got.data());
  EXPECT_EQ(got, std::vector<uint8_t>(got.size(), 0));
  kv.check_invariants();
}

// Compaction moves are applied in batches (bounded scratch, KvStore::kMoveBatch): a compaction of many more slots
// than a batch, with shared blocks copied on write, keeps every kept slot's bytes and leaves the fork's intact.
TEST(KvCacheMemory, CompactionLargerThanAMoveBatchKeepsEverySlot) {
  std::mt19937 rng(11);
  KvCache kv(infokv_test::kv_config(2, 1, 2, 16, 4000));
  const int32_t n = 12000;  // 2 layers x ~6,000 moves: more than one batch
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = i;
  kv.add(0);
  kv.append_slots(0, pos.data(), n);
  // Slot j of layer l holds K = (l, j), V = (-l, -j) as floats.
  const int64_t bb = kv.block_bytes();
  for (int32_t l = 0; l < 2; ++l) {
    const std::vector<int32_t> &blocks = kv.seq(0).layers[static_cast<size_t>(l)].blocks;
    std::vector<float> data(blocks.size() * static_cast<size_t>(bb) / 4, 0.0f);
    for (int32_t j = 0; j < n; ++j) {
      float *blk = data.data() + static_cast<size_t>(j / 16) * static_cast<size_t>(bb / 4);
      blk[(j % 16) * 2] = static_cast<float>(l);
      blk[(j % 16) * 2 + 1] = static_cast<float>(j);
      blk[32 + (j % 16) * 2] = static_cast<float>(-l);
      blk[32 + (j % 16) * 2 + 1] = static_cast<float>(-j);
    }
    kv.store().write_blocks(blocks, reinterpret_cast<const uint8_t *>(data.data()));
  }
  for (bool forked : {false, true}) {
    if (forked) kv.fork(0, 1);
    std::vector<std::vector<int32_t>> keep(2);
    for (int32_t l = 0; l < 2; ++l)
      for (int32_t j = 0; j < kv.seq(0).layers[static_cast<size_t>(l)].n(); ++j)
        if (rng() % 2) keep[static_cast<size_t>(l)].push_back(j);
    std::vector<std::vector<int32_t>> want_pos(2);
    for (int32_t l = 0; l < 2; ++l)
      for (int32_t j : keep[static_cast<size_t>(l)]) want_pos[static_cast<size_t>(l)].push_back(kv.seq(0).layers[static_cast<size_t>(l)].pos[static_cast<size_t>(j)]);
    kv.compact(0, keep);
    for (int32_t target : forked ? std::vector<int32_t>{0, 1} : std::vector<int32_t>{0}) {
      for (int32_t l = 0; l < 2; ++l) {
        const LayerSlots &L = kv.seq(target).layers[static_cast<size_t>(l)];
        if (target == 0) {
          ASSERT_EQ(L.pos, want_pos[static_cast<size_t>(l)]);
        }
        std::vector<float> got(L.blocks.size() * static_cast<size_t>(bb) / 4);
        kv.store().read_blocks(L.blocks, reinterpret_cast<uint8_t *>(got.data()));
        for (int32_t j = 0; j < L.n(); ++j) {
          const float *blk = got.data() + static_cast<size_t>(j / 16) * static_cast<size_t>(bb / 4);
          const float p = static_cast<float>(L.pos[static_cast<size_t>(j)]);
          ASSERT_EQ(blk[(j % 16) * 2], static_cast<float>(l));
          ASSERT_EQ(blk[(j % 16) * 2 + 1], p) << "seq " << target << " layer " << l << " slot " << j;
          ASSERT_EQ(blk[32 + (j % 16) * 2 + 1], -p);
        }
      }
    }
    kv.check_invariants();
  }
}
