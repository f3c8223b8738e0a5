// GPU kernel-pipeline benchmark: runs one decoder step's kernels (cuBLAS GEMMs + infokv's CUDA kernels) for a
// model shape on device buffers, at batch 1 and 16 and contexts 1K/8K/32K, with the full cache and with 25% of it
// kept (what InfoKV at a 25% budget leaves attention to read), and a prefill of 512 tokens (on an empty cache and
// on 8K cached slots; the "cache" column holds the cached slots for those rows). It prints tokens/s and
// the achieved memory bandwidth (bytes of weights + KV read per step over the step's time) as a fraction of the
// card's peak.
//
// What this is NOT: the end-to-end Session decode on CUDA (tests/gpu/run.sh times that separately with
// `infokv generate --device cuda`); the numbers are the device work a step needs, timed back to back on one
// stream, without host-side scheduling, sampling or compression. The table says so.
//
//   infokv_gpu_bench [--preset llama-3.2-1b|llama-3.1-8b|smollm2-135m] [--dtype f16|bf16] [--iters N] [--json]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/device.hpp"
#include "kernels/cuda/ops_cuda.hpp"
#include "kernels/cuda/runtime.hpp"
#include "kernels/ggml_types.hpp"

using namespace infokv;
using cuda::DeviceBuffer;

namespace {

struct Shape {
  const char *name;
  int64_t d, layers, heads, kv_heads, ff, vocab;
};
const Shape kShapes[] = {
    {"llama-3.2-1b", 2048, 16, 32, 8, 8192, 128256},
    {"llama-3.1-8b", 4096, 32, 32, 8, 14336, 128256},
    {"smollm2-135m", 576, 30, 9, 3, 1536, 49152},
};

#define CHECK(expr)                                                                         \
  do {                                                                                      \
    Status s_ = (expr);                                                                     \
    if (s_ != Status::ok) {                                                                 \
      std::fprintf(stderr, "bench: %s failed with status %d\n", #expr, static_cast<int>(s_)); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

struct Bench {
  Shape sh;
  uint32_t wtype;
  KvDtype act = KvDtype::f16;
  int64_t hd;
  // one layer's weights reused for every layer (timing only depends on shapes; the bytes-read accounting still
  // counts every layer, and reusing one layer's weights can only flatter L2 for tiny models, noted in the table)
  DeviceBuffer wq, wk, wv, wo, wg, wu, wdn, wout, norm;
  cuda::StreamOwner stream;

  Bench(const Shape &s, uint32_t wt) : sh(s), wtype(wt), hd(s.d / s.heads) {
    const int64_t qd = s.heads * hd, kvd = s.kv_heads * hd;
    auto mk = [&](int64_t rows, int64_t cols) {
      DeviceBuffer b(static_cast<size_t>(rows * cols) * 2);
      b.zero();
      return b;
    };
    wq = mk(qd, s.d); wk = mk(kvd, s.d); wv = mk(kvd, s.d); wo = mk(s.d, qd);
    wg = mk(s.ff, s.d); wu = mk(s.ff, s.d); wdn = mk(s.d, s.ff); wout = mk(s.vocab, s.d);
    norm = DeviceBuffer(static_cast<size_t>(s.d) * 4);
    norm.zero();
  }

  int64_t weight_bytes() const {
    const int64_t qd = sh.heads * hd, kvd = sh.kv_heads * hd;
    return 2 * (sh.layers * (sh.d * qd * 2 + sh.d * kvd * 2 + 3 * sh.d * sh.ff) + sh.vocab * sh.d);
  }

  // Seconds per step of `batch` sequences, each decoding n_q tokens over `slots` cached slots per layer.
  double step(int64_t batch, int64_t n_q, int32_t slots, int iters) {
    const int64_t T = batch * n_q, qd = sh.heads * hd, kvd = sh.kv_heads * hd;
    const int32_t bs = 16, nb = (slots + n_q + bs - 1) / bs;
    const int64_t stride = 2LL * sh.kv_heads * bs * hd * 2;
    DeviceBuffer x(T * sh.d * 4), xn(T * sh.d * 4), q(T * qd * 4), k(T * kvd * 4), v(T * kvd * 4), att(T * qd * 4),
        o(T * sh.d * 4), g(T * sh.ff * 4), u(T * sh.ff * 4), logits(std::min<int64_t>(T, batch) * sh.vocab * 4), pos(T * 4);
    for (DeviceBuffer *b : {&x, &q, &k, &v, &pos}) b->zero();
    std::vector<double> freq_host(static_cast<size_t>(hd / 2));
    for (int64_t i = 0; i < hd / 2; ++i) freq_host[static_cast<size_t>(i)] = std::pow(500000.0, -2.0 * static_cast<double>(i) / static_cast<double>(hd));
    DeviceBuffer freq(freq_host.size() * sizeof(double));
    freq.upload(freq_host.data(), freq_host.size() * sizeof(double));
    // every sequence and layer gets its own blocks so that the KV bytes really come from memory
    DeviceBuffer pool(static_cast<size_t>(stride * nb * batch * sh.layers));
    pool.zero();
    std::vector<int32_t> table(static_cast<size_t>(nb * batch * sh.layers));
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
    DeviceBuffer dtable(table.size() * 4);
    dtable.upload(table.data(), table.size() * 4);
    cuda::Stream *st = stream.get();
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    auto run = [&] {
      for (int64_t l = 0; l < sh.layers; ++l) {
        CHECK(cuda::rmsnorm(xn.as<float>(), x.as<float>(), norm.as<float>(), T, sh.d, 1e-5f, st));
        CHECK(cuda::matmul(q.as<float>(), xn.as<float>(), wq.get(), wtype, T, qd, sh.d, st));
        CHECK(cuda::matmul(k.as<float>(), xn.as<float>(), wk.get(), wtype, T, kvd, sh.d, st));
        CHECK(cuda::matmul(v.as<float>(), xn.as<float>(), wv.get(), wtype, T, kvd, sh.d, st));
        CHECK(cuda::rope(q.as<float>(), pos.as<int32_t>(), T, sh.heads, hd, freq.as<double>(), st));
        CHECK(cuda::rope(k.as<float>(), pos.as<int32_t>(), T, sh.kv_heads, hd, freq.as<double>(), st));
        for (int64_t b = 0; b < batch; ++b) {
          PagedKv kv{pool.as<uint8_t>(), stride, dtable.as<int32_t>() + (l * batch + b) * nb, slots + static_cast<int32_t>(n_q),
                          bs, static_cast<int32_t>(sh.kv_heads), static_cast<int32_t>(hd), KvDtype::f16};
          CHECK(cuda::kv_append(kv, slots, k.as<float>() + b * n_q * kvd, v.as<float>() + b * n_q * kvd, n_q, st));
          CHECK(cuda::paged_attention(att.as<float>() + b * n_q * qd, q.as<float>() + b * n_q * qd, n_q,
                                      static_cast<int32_t>(sh.heads), kv, slots + 1, scale, nullptr, nullptr, st));
        }
        CHECK(cuda::matmul(o.as<float>(), att.as<float>(), wo.get(), wtype, T, sh.d, qd, st));
        CHECK(cuda::add_inplace(x.as<float>(), o.as<float>(), T * sh.d, st));
        CHECK(cuda::rmsnorm(xn.as<float>(), x.as<float>(), norm.as<float>(), T, sh.d, 1e-5f, st));
        CHECK(cuda::matmul(g.as<float>(), xn.as<float>(), wg.get(), wtype, T, sh.ff, sh.d, st));
        CHECK(cuda::matmul(u.as<float>(), xn.as<float>(), wu.get(), wtype, T, sh.ff, sh.d, st));
        CHECK(cuda::swiglu(g.as<float>(), g.as<float>(), u.as<float>(), T * sh.ff, st));
        CHECK(cuda::matmul(o.as<float>(), g.as<float>(), wdn.get(), wtype, T, sh.d, sh.ff, st));
        CHECK(cuda::add_inplace(x.as<float>(), o.as<float>(), T * sh.d, st));
      }
      CHECK(cuda::rmsnorm(xn.as<float>(), x.as<float>(), norm.as<float>(), T, sh.d, 1e-5f, st));
      // the LM head only for the last token of each sequence
      CHECK(cuda::matmul(logits.as<float>(), xn.as<float>(), wout.get(), wtype, std::min<int64_t>(T, batch), sh.vocab, sh.d, st));
    };
    run();  // warm-up (cuBLAS heuristics, memory pool)
    stream.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) run();
    stream.synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
  }
};

}  // namespace

int main(int argc, char **argv) {
  std::string preset = "llama-3.2-1b", dtype = "f16";
  int iters = 5;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--preset" && i + 1 < argc) preset = argv[++i];
    else if (a == "--dtype" && i + 1 < argc) dtype = argv[++i];
    else if (a == "--iters" && i + 1 < argc) iters = std::atoi(argv[++i]);
    else if (a == "--json") json = true;
    else { std::fprintf(stderr, "usage: %s [--preset P] [--dtype f16|bf16] [--iters N] [--json]\n", argv[0]); return 2; }
  }
  const DeviceReport r = device_report();
  if (r.cuda_devices == 0) {
    std::printf("infokv_gpu_bench: no CUDA device (%s); nothing measured\n", r.reason.c_str());
    return 0;
  }
  const Shape *sh = nullptr;
  for (const Shape &s : kShapes) if (preset == s.name) sh = &s;
  if (sh == nullptr) { std::fprintf(stderr, "unknown preset %s\n", preset.c_str()); return 2; }
  std::string why;
  if (!cuda::cublas_available(&why)) { std::printf("infokv_gpu_bench: cuBLAS not loadable (%s)\n", why.c_str()); return 1; }
  cuda::set_device(0);
  const CudaDeviceInfo &dev = r.devices[0];
  const uint32_t wt = static_cast<uint32_t>(dtype == "bf16" ? GgmlType::BF16 : GgmlType::F16);
  Bench b(*sh, wt);
  const double peak = dev.peak_bandwidth_gbs * 1e9;
  std::printf("device: %s (cc %d.%d, %d SMs, peak %.0f GB/s); shape %s, %s weights and KV\n", dev.name.c_str(), dev.cc_major,
              dev.cc_minor, dev.sm_count, dev.peak_bandwidth_gbs, sh->name, dtype.c_str());
  std::printf("NOTE: kernel pipeline of one step on device buffers (cuBLAS + infokv kernels), not an end-to-end Session run.\n"
              "      25%% = a cache compressed to a quarter (what an InfoKV 25%% budget leaves attention to read; compression\n"
              "      itself does not run on CUDA yet).\n\n");
  std::printf("%-8s %-6s %-6s %12s %12s %10s\n", "phase", "batch", "ctx", "cache", "tok/s", "BW frac");
  const int64_t kv_tok_bytes = 2 * sh->kv_heads * b.hd * 2 * sh->layers;  // K+V, f16, all layers
  std::string js = "[";
  for (int64_t batch : {1, 16})
    for (int32_t ctx : {1024, 8192, 32768})
      for (int frac : {100, 25}) {
        const int32_t slots = static_cast<int32_t>(static_cast<int64_t>(ctx) * frac / 100);
        const int64_t pool_bytes = static_cast<int64_t>(slots + 16) * kv_tok_bytes * batch;
        if (dev.free_bytes > 0 && pool_bytes > dev.free_bytes * 8 / 10) {
          std::printf("%-8s %-6lld %-6d %11d%% %12s %10s\n", "decode", static_cast<long long>(batch), ctx, frac, "skipped", "(memory)");
          continue;
        }
        const double t = b.step(batch, 1, slots, iters);
        const double bytes = static_cast<double>(b.weight_bytes()) + static_cast<double>(slots) * kv_tok_bytes * batch;
        const double tps = batch / t, frac_bw = peak > 0 ? bytes / t / peak : 0;
        std::printf("%-8s %-6lld %-6d %11d%% %12.1f %10.2f\n", "decode", static_cast<long long>(batch), ctx, frac, tps, frac_bw);
        char buf[256];
        std::snprintf(buf, sizeof buf, "%s{\"phase\":\"decode\",\"batch\":%lld,\"ctx\":%d,\"cache_pct\":%d,\"tok_s\":%.2f,\"bw_frac\":%.3f}",
                      js.size() > 1 ? "," : "", static_cast<long long>(batch), ctx, frac, tps, frac_bw);
        js += buf;
      }
  // Prefill of 512 tokens, from an empty cache and on top of 8K cached slots (a chunked long prompt); both take
  // the query-tiled attention kernel (n_q >= cuda::kPrefillTiledMinQueries, no score outputs).
  for (int32_t cached : {0, 8192}) {
    const double tp = b.step(1, 512, cached, iters);
    std::printf("%-8s %-6d %-6d %12d %12.1f %10s\n", "prefill", 1, 512, cached, 512 / tp, "-");
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s{\"phase\":\"prefill\",\"batch\":1,\"ctx\":512,\"cached\":%d,\"tok_s\":%.2f}",
                  js.size() > 1 ? "," : "", cached, 512 / tp);
    js += buf;
  }
  js += "]";
  if (json) std::printf("%s\n", js.c_str());
  return 0;
}
