// Google Benchmark: prefill and decode throughput on stories260K, batched decode, compression cost, side-channel
// overhead, bytes per cached token, one weight product alone (Matmul, GFLOP/s), and the machine's streaming-read
// bandwidth (StreamRead, the ceiling of decode on a model far larger than the caches). Counters report tokens/s of
// wall time; run with --benchmark_counters_tabular=true.
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compress/policy_table.hpp"
#include "kernels/cpu/matmul_act8.hpp"
#include "kernels/thread_pool.hpp"
#include "kernels/fp16.hpp"
#include "kernels/ggml_types.hpp"
#include "kernels/ops.hpp"
#include "model/model.hpp"
#include "session/session.hpp"
#include "support/paths.hpp"

using namespace infokv;

namespace {

std::shared_ptr<const Model> model() {
  static std::shared_ptr<const Model> m = Model::load(infokv_test::models_dir() + "/stories260K/stories260K.gguf");
  return m;
}

std::vector<int32_t> tokens(size_t n) {
  std::vector<int32_t> t{1};
  for (size_t i = 1; i < n; ++i) t.push_back(static_cast<int32_t>(3 + (i * 7919) % 500));
  return t;
}

// A new sequence in s with the first n of tokens() decoded as one batch.
int32_t prefilled(Session &s, size_t n) {
  const int32_t id = s.add_sequence();
  std::vector<BatchToken> b;
  for (int32_t t : tokens(n)) b.push_back({id, t, false});
  s.decode(b);
  return id;
}

SessionOptions options(int threads, PolicyKind policy = PolicyKind::none) {
  SessionOptions o;
  o.n_threads = threads;
  o.kv_pool_blocks = 5 * 2048;
  o.compression.policy = policy;
  o.compression.budget_fraction = 0.25;
  o.compression.compress_after_prefill = false;
  o.compression.interval = 1 << 30;
  return o;
}

void Prefill(benchmark::State &st) {
  const auto prompt = tokens(static_cast<size_t>(st.range(1)));
  for (auto _ : st) {
    Session s(model(), options(static_cast<int>(st.range(0))));
    const int32_t id = s.add_sequence();
    std::vector<BatchToken> b;
    for (int32_t t : prompt) b.push_back({id, t, false});
    s.decode(b);
    benchmark::DoNotOptimize(s.logits(id).data());
  }
  st.counters["tok/s"] = benchmark::Counter(static_cast<double>(prompt.size()) * st.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(Prefill)->ArgNames({"threads", "tokens"})->Args({1, 256})->Args({2, 256})->Unit(benchmark::kMillisecond)->UseRealTime();

// Decode one token at a time after a prompt (the context grows from 64 to 64 + iterations).
void Decode(benchmark::State &st) {
  Session s(model(), options(static_cast<int>(st.range(0))));
  const int32_t id = prefilled(s, 64);
  int32_t next = 5;
  for (auto _ : st) {
    if (s.info(id).length > 1500) {
      st.PauseTiming();
      s.truncate(id, 64);
      s.decode({{id, next, false}});
      st.ResumeTiming();
    }
    s.decode({{id, next, false}});
    next = 3 + (next * 31) % 500;
  }
  st.counters["tok/s"] = benchmark::Counter(static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(Decode)->ArgNames({"threads"})->Arg(1)->Arg(2)->UseRealTime();

// llama-bench's tg128: 128 tokens decoded one at a time from an empty context (BOS only).
void Decode128(benchmark::State &st) {
  Session s(model(), options(static_cast<int>(st.range(0))));
  const int32_t id = s.add_sequence();
  for (auto _ : st) {
    s.truncate(id, 0);
    int32_t next = 1;
    for (int i = 0; i < 128; ++i) {
      s.decode({{id, next, false}});
      next = 3 + (next * 31 + i) % 500;
    }
  }
  st.counters["tok/s"] = benchmark::Counter(128.0 * static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(Decode128)->ArgNames({"threads"})->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// One decode step for N sequences batched together (each at context 128).
void DecodeBatch(benchmark::State &st) {
  const int n = static_cast<int>(st.range(0));
  Session s(model(), options(1));
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) {
    ids.push_back(s.add_sequence());
    std::vector<BatchToken> b;
    for (int32_t t : tokens(128)) b.push_back({ids.back(), t, false});
    s.decode(b);
  }
  int64_t steps = 0;
  for (auto _ : st) {
    std::vector<BatchToken> b;
    for (int32_t id : ids) b.push_back({id, 7, false});
    s.decode(b);
    if (++steps % 512 == 0) {
      st.PauseTiming();
      for (int32_t id : ids) s.truncate(id, 128), s.decode({{id, 7, false}});
      st.ResumeTiming();
    }
  }
  st.counters["tok/s"] = benchmark::Counter(static_cast<double>(n) * st.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(DecodeBatch)->ArgNames({"seqs"})->Arg(1)->Arg(4)->Arg(16)->UseRealTime();

// Decode with the slot channels of each policy on (scores are recorded, no compression happens).
void SideChannels(benchmark::State &st) {
  const auto policy = static_cast<PolicyKind>(st.range(0));
  Session s(model(), options(1, policy));
  const int32_t id = prefilled(s, 256);
  int64_t steps = 0;
  for (auto _ : st) {
    s.decode({{id, 9, false}});
    if (++steps % 512 == 0) {
      st.PauseTiming();
      s.truncate(id, 256);
      s.decode({{id, 9, false}});
      st.ResumeTiming();
    }
  }
  st.SetLabel(policy_name(policy));
  st.counters["tok/s"] = benchmark::Counter(static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(SideChannels)->ArgNames({"policy"})->DenseRange(0, 3)->UseRealTime();

// One compression of a 1024-token context to 25% (fork per iteration so every run compresses the same cache).
void CompressStep(benchmark::State &st) {
  const auto policy = static_cast<PolicyKind>(st.range(0));
  Session s(model(), options(1, policy));
  const int32_t id = prefilled(s, 1024);
  for (auto _ : st) {
    st.PauseTiming();
    const int32_t f = s.fork_sequence(id);
    st.ResumeTiming();
    s.compressor().compress(f, 256);
    st.PauseTiming();
    s.remove_sequence(f);
    st.ResumeTiming();
  }
  st.SetLabel(policy_name(policy));
}
BENCHMARK(CompressStep)->ArgNames({"policy"})->DenseRange(1, 7)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Decode at a long context (1536 tokens) with the full cache and with a 25% cache.
void DecodeLongContext(benchmark::State &st) {
  const bool compressed = st.range(0) != 0;
  Session s(model(), options(1, compressed ? PolicyKind::infokv : PolicyKind::none));
  const int32_t id = prefilled(s, 1536);
  if (compressed) s.compressor().compress(id, 384);
  int64_t steps = 0;
  for (auto _ : st) {
    s.decode({{id, 11, false}});
    if (++steps % 256 == 0) {
      st.PauseTiming();
      s.truncate(id, s.info(id).length - 256);
      s.decode({{id, 11, false}});
      st.ResumeTiming();
    }
  }
  st.SetLabel(compressed ? "infokv 25%" : "full cache");
  st.counters["tok/s"] = benchmark::Counter(static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
  st.counters["kv_bytes"] = static_cast<double>(s.info(id).bytes);
}
BENCHMARK(DecodeLongContext)->ArgNames({"compressed"})->Arg(0)->Arg(1)->UseRealTime();

// Bytes per cached token against 2 x layers x kv_heads x head_dim x dtype size.
void BytesPerToken(benchmark::State &st) {
  const auto dt = static_cast<KvDtype>(st.range(0));
  SessionOptions o = options(1);
  o.kv_dtype = dt;
  double per_token = 0;
  for (auto _ : st) {
    Session s(model(), o);
    const int32_t id = prefilled(s, 1000);
    per_token = static_cast<double>(s.info(id).bytes) / 1000.0;
  }
  const HParams &hp = model()->hparams();
  st.counters["bytes/token"] = per_token;
  st.counters["theory"] = 2.0 * hp.n_layer * hp.n_head_kv * static_cast<double>(kv_bytes(dt, hp.head_dim));
  st.SetLabel(kv_dtype_name(dt));
}
BENCHMARK(BytesPerToken)->DenseRange(1, 3)->Iterations(1);

// What choosing costs on a real model (SmolLM2-135M, $INFOKV_SMOLLM2 or the fetched file): one compression of a
// 2,048-token context to 25% against the 1,024 decode steps of the default interval at that context, for auto and
// for snapkv (the fixed policy auto's window scoring comes from), and decode speed with each policy's slot channels
// on. Counters: decode_ms (one step), compress_ms (one compression), overhead_% = compress_ms / (1024 x decode_ms).
void ChooseOverhead(benchmark::State &st) {
  const std::string path = infokv_test::smollm2_path();
  std::shared_ptr<const Model> m;
  try {
    m = Model::load(path);
  } catch (const std::exception &e) {
    st.SkipWithError(("SmolLM2 not found (packaging/fetch_models.sh; $INFOKV_SMOLLM2): " + std::string(e.what())).c_str());
    return;
  }
  const auto policy = static_cast<PolicyKind>(st.range(0));
  SessionOptions o;
  o.n_threads = static_cast<int32_t>(st.range(1));
  o.compression.policy = policy;
  o.compression.budget_fraction = 0.25;
  o.compression.compress_after_prefill = false;
  o.compression.interval = 1 << 30;
  Session s(m, o);
  const int32_t id = prefilled(s, 2048);
  // Decode speed at this context, slot channels on: 96 steps on a fork (truncating would also drop the observation
  // window's query rows, and the compression below would have nothing to score with).
  const int32_t probe = s.fork_sequence(id);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 96; ++i) s.decode({{probe, 11, false}});
  const double decode_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 96.0;
  s.remove_sequence(probe);
  if (o.compression.needs_window_queries() && s.kv().seq(id).window_pos.empty())
    st.SkipWithError("no observation-window rows to score with");
  double compress_ms = 0;
  int64_t n = 0;
  for (auto _ : st) {
    st.PauseTiming();
    const int32_t f = s.fork_sequence(id);
    st.ResumeTiming();
    const auto c0 = std::chrono::steady_clock::now();
    if (policy != PolicyKind::none) s.compressor().compress(f, 512);  // none: only the decode speed without slot channels
    compress_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c0).count();
    ++n;
    st.PauseTiming();
    s.remove_sequence(f);
    st.ResumeTiming();
  }
  compress_ms /= static_cast<double>(std::max<int64_t>(n, 1));
  st.SetLabel(policy_name(policy));
  st.counters["decode_ms"] = decode_ms;
  st.counters["compress_ms"] = compress_ms;
  st.counters["overhead_%"] = 100.0 * compress_ms / (1024.0 * decode_ms);
}
BENCHMARK(ChooseOverhead)->ArgNames({"policy", "threads"})->Args({static_cast<int>(PolicyKind::none), 2})
    ->Args({static_cast<int>(PolicyKind::snapkv), 2})->Args({static_cast<int>(PolicyKind::h2o), 2})
    ->Args({static_cast<int>(PolicyKind::infokv), 2})
    ->Args({static_cast<int>(PolicyKind::auto_), 2})->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

// One weight product out[n, m] = x[n, k] W[m, k]^T at SmolLM2-135M's MLP shape (m = 1536, k = 576) for a weight type
// (GGML type id), n tokens, 1 or 2 threads: GFLOP/s of the kernel alone, without the rest of a forward pass. Random
// weights; each block's f16 scale (and min) is set to a small normal number so the values are realistic.
void Matmul(benchmark::State &st) {
  const auto type = static_cast<uint32_t>(st.range(0));
  const int64_t n = st.range(1), m = 1536, k = 576;
  const GgmlTypeTraits tr = ggml_type_traits(type);
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint8_t> w(static_cast<size_t>(m * k / tr.block_elems * tr.block_bytes));
  for (auto &b : w) b = static_cast<uint8_t>(rng());
  if (type == static_cast<uint32_t>(GgmlType::F16)) {
    auto *h = reinterpret_cast<uint16_t *>(w.data());
    for (int64_t i = 0; i < m * k; ++i) h[i] = float_to_fp16(u(rng));
  } else if (type == static_cast<uint32_t>(GgmlType::Q8_0) || type == static_cast<uint32_t>(GgmlType::Q4_1) ||
             type == static_cast<uint32_t>(GgmlType::Q4_0)) {
    for (size_t b = 0; b < w.size(); b += tr.block_bytes) {
      const uint16_t d = float_to_fp16(0.01f * (1.0f + u(rng))), mn = float_to_fp16(-0.05f * (1.0f + u(rng)));
      std::memcpy(&w[b], &d, 2);
      if (type == static_cast<uint32_t>(GgmlType::Q4_1)) std::memcpy(&w[b + 2], &mn, 2);
    }
  } else {
    st.SkipWithError("weight type not set up here");
    return;
  }
  std::vector<float> x(static_cast<size_t>(n * k)), out(static_cast<size_t>(n * m));
  for (auto &v : x) v = u(rng);
  ThreadPool pool(static_cast<int>(st.range(2)));
  for (auto _ : st) {
    cpu::matmul(out.data(), x.data(), w.data(), type, n, m, k, &pool);
    benchmark::DoNotOptimize(out.data());
  }
  st.SetLabel(ggml_type_name(type));
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(n * m * k) * static_cast<double>(st.iterations()),
                                              benchmark::Counter::kIsRate);
}
BENCHMARK(Matmul)->ArgNames({"type", "tokens", "threads"})->ArgsProduct({{1, 8, 3}, {1, 512}, {1, 2}})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

// The integer-activation decode products (cpu::matmul_act8, two planes: the default int16) of a 2048 x 2048 weight
// matrix of type (GGML id: 2 Q4_0, 3 Q4_1, 8 Q8_0, 12 Q4_K, 14 Q6_K) with n tokens on one thread: what a decode step
// over n sequences pays per matrix (cpu::RowsIndependent keeps this path up to 15 tokens). Reported per token.
void MatmulAct8Batch(benchmark::State &st) {
  const auto type = static_cast<uint32_t>(st.range(0));
  const int64_t n = st.range(1), m = 2048, k = 2048;
  const GgmlTypeTraits tr = ggml_type_traits(type);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint8_t> w(static_cast<size_t>(m * k / tr.block_elems * tr.block_bytes));
  for (auto &b : w) b = static_cast<uint8_t>(rng());
  for (size_t b = 0; b < w.size(); b += tr.block_bytes) {  // finite scales of a realistic size in every block
    const uint16_t d = float_to_fp16(0.002f * (1.5f + u(rng)));
    const size_t at = type == static_cast<uint32_t>(GgmlType::Q6_K) ? 208 : 0;
    std::memcpy(&w[b + at], &d, 2);
    if (type == static_cast<uint32_t>(GgmlType::Q4_1) || type == static_cast<uint32_t>(GgmlType::Q4_K))
      std::memcpy(&w[b + 2], &d, 2);
  }
  std::vector<float> x(static_cast<size_t>(n * k)), out(static_cast<size_t>(n * m));
  for (auto &v : x) v = u(rng);
  if (!cpu::act8_fast()) {
    st.SkipWithError("this CPU has no AVX-512 VNNI: decode keeps the f32 products");
    return;
  }
  for (auto _ : st) {
    cpu::matmul_act8(out.data(), x.data(), w.data(), type, n, m, k, 2, nullptr);
    benchmark::DoNotOptimize(out.data());
  }
  st.SetLabel(ggml_type_name(type));
  st.counters["us/token"] = benchmark::Counter(static_cast<double>(n) * static_cast<double>(st.iterations()),
                                               benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(MatmulAct8Batch)->ArgNames({"type", "tokens"})->ArgsProduct({{2, 3, 8, 12, 14}, {1, 4, 8}})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

// Reads 1 GiB once per iteration, split over the threads as decode splits a weight matrix (contiguous ranges), and
// reports bytes per second: decode of a model that streams from DRAM cannot go faster than its weight bytes per token
// divided by this. Eight independent sums of 64-bit words, so the loads, not the additions, are the limit.
void StreamRead(benchmark::State &st) {
  const size_t bytes = size_t{1} << 30, words = bytes / 8;
  std::vector<uint64_t> buf(words);
  for (size_t i = 0; i < words; ++i) buf[i] = i * 0x9E3779B97F4A7C15ull;  // every page touched and distinct
  ThreadPool pool(static_cast<int>(st.range(0)));
  std::atomic<uint64_t> total{0};
  for (auto _ : st) {
    pool.parallel_for(static_cast<int64_t>(words / 4096), 1, [&](int64_t a, int64_t b) {
      // 16-byte vectors (GCC's vector extension: SSE2 loads on any x86-64, NEON on ARM), four sums of two lanes
      typedef uint64_t V2 __attribute__((vector_size(16)));
      V2 s[4] = {};
      for (size_t i = static_cast<size_t>(a) * 4096; i < static_cast<size_t>(b) * 4096; i += 8)
        for (int j = 0; j < 4; ++j) {
          V2 v;
          std::memcpy(&v, &buf[i + 2 * static_cast<size_t>(j)], 16);
          s[j] += v;
        }
      const V2 t = (s[0] ^ s[1]) ^ (s[2] ^ s[3]);
      total.fetch_add(t[0] ^ t[1], std::memory_order_relaxed);
    }, 1);
    benchmark::DoNotOptimize(total.load());
  }
  st.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes) * static_cast<double>(st.iterations()) / 1e9,
                                           benchmark::Counter::kIsRate);
}
BENCHMARK(StreamRead)->ArgNames({"threads"})->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
