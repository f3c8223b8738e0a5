// The CUDA forward pass behind DeviceForward: weights resident on the GPU (f16/bf16; f32 checkpoints converted to
// f16 on load), a device mirror of the KV block pool (same block ids and layout as the host KvCache), activations
// in f32, GEMMs through cuBLAS (f16/bf16 in, f32 accumulate), the other operations through kernels/cuda.
// One stream per session; the only synchronisation in a step is the download of the logits.
//
// NOT YET RUN ON A GPU: written and compiled on a machine without one. tests/gpu/test_forward_gpu.cpp compares it
// with the CPU path; until that has passed on hardware, "auto" does not pick it (src/backend/device.cpp).
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/device_forward.hpp"
#include "gguf/ggml_types.hpp"
#include "kernels/cuda/ops_cuda.hpp"
#include "kernels/cuda/runtime.hpp"
#include "kv/kv_cache.hpp"
#include "model/model.hpp"
#include "util/error.hpp"

namespace infokv {
namespace cuda {

namespace {

void ok(Status s, const char *what) {
  if (s != Status::ok) fail(s == Status::out_of_memory ? s : Status::internal, std::string("CUDA ") + what + " failed (status " +
                                                                                   std::to_string(static_cast<int>(s)) + ")");
}

struct DevWeight {
  DeviceBuffer buf;
  uint32_t type = 0;  // ggml type on the device: F16 or BF16
  int64_t rows = 0, cols = 0;
};

// Uploads a matrix in F16/BF16 as is; F32 is converted to F16 on the host first (weights resident in 16 bits).
DevWeight upload_weight(const Weight &w) {
  DevWeight d;
  d.rows = w.rows;
  d.cols = w.cols;
  const size_t n = static_cast<size_t>(w.rows * w.cols);
  switch (static_cast<GgmlType>(w.type)) {
    case GgmlType::F16:
    case GgmlType::BF16:
      d.type = w.type;
      d.buf = DeviceBuffer(n * 2);
      d.buf.upload(w.data, n * 2);
      break;
    case GgmlType::F32: {
      d.type = static_cast<uint32_t>(GgmlType::F16);
      std::vector<uint16_t> h(n);
      cpu::convert(h.data(), KvDtype::f16, w.data, KvDtype::f32, static_cast<int64_t>(n));
      d.buf = DeviceBuffer(n * 2);
      d.buf.upload(h.data(), n * 2);
      break;
    }
    default: fail(Status::unsupported, "CUDA backend: weight type of " + w.name + " is not F32/F16/BF16");
  }
  return d;
}

DeviceBuffer upload_f32(const std::vector<float> &v) {
  DeviceBuffer b(v.size() * 4);
  b.upload(v.data(), v.size() * 4);
  return b;
}

struct DevLayer {
  DeviceBuffer attn_norm, ffn_norm;
  DevWeight wq, wk, wv, wo, gate, up, down;
};

class CudaForward final : public DeviceForward {
 public:
  CudaForward(const Model &m, const KvCache &kv, int32_t device) : model_(m), device_(device) {
    set_device(device);
    std::string why;
    if (!cublas_available(&why)) fail(Status::no_device, "cuBLAS is not available: " + why);
    stream_ = std::make_unique<StreamOwner>();
    const HParams &hp = m.hparams();
    layers_.resize(static_cast<size_t>(hp.n_layer));
    for (int32_t l = 0; l < hp.n_layer; ++l) {
      const LayerWeights &L = m.layer(l);
      DevLayer &D = layers_[static_cast<size_t>(l)];
      D.attn_norm = upload_f32(L.attn_norm);
      D.ffn_norm = upload_f32(L.ffn_norm);
      D.wq = upload_weight(L.wq);
      D.wk = upload_weight(L.wk);
      D.wv = upload_weight(L.wv);
      D.wo = upload_weight(L.wo);
      D.gate = upload_weight(L.w_gate);
      D.up = upload_weight(L.w_up);
      D.down = upload_weight(L.w_down);
    }
    emb_ = upload_weight(m.token_embd());
    if (!m.tied_output()) out_ = upload_weight(m.output());
    out_norm_ = upload_f32(m.output_norm());
    const KvStats st = kv.stats();
    block_bytes_ = kv.block_bytes();
    pool_ = DeviceBuffer(static_cast<size_t>(st.blocks_total * block_bytes_));
  }

  std::string describe() const override { return "cuda:" + std::to_string(device_); }

  void forward_chunk(const int32_t *tokens, const int32_t *positions, int64_t T, const ForwardGroups &groups, KvCache &kv,
                     const std::vector<int64_t> &rows, float *out) override {
    set_device(device_);
    const HParams &hp = model_.hparams();
    const int64_t d = hp.n_embd, hd = hp.head_dim, nh = hp.n_head, nkv = hp.n_head_kv, ff = hp.n_ff, V = hp.n_vocab;
    const int64_t qd = nh * hd, kvd = nkv * hd;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    Stream *st = stream_->get();
    ensure(T, d, qd, kvd, ff, static_cast<int64_t>(rows.size()), V);

    ids_.upload(tokens, static_cast<size_t>(T) * 4, st);
    pos_.upload(positions, static_cast<size_t>(T) * 4, st);
    // Block tables of every (group, layer), staged on the host and uploaded once per chunk.
    struct ViewRef { int64_t offset; int32_t n_slots; };
    std::vector<ViewRef> refs;
    table_host_.clear();
    for (const auto &g : groups)
      for (int32_t l = 0; l < hp.n_layer; ++l) {
        const cpu::PagedKv v = kv.view(g.first, l);
        const int32_t nb = (v.n_slots + v.block_size - 1) / v.block_size;
        refs.push_back({static_cast<int64_t>(table_host_.size()), v.n_slots});
        table_host_.insert(table_host_.end(), v.block_table, v.block_table + nb);
      }
    if (table_dev_.bytes() < table_host_.size() * 4 || table_dev_.bytes() == 0)
      table_dev_ = DeviceBuffer(std::max<size_t>(64, table_host_.size() * 8));
    table_dev_.upload(table_host_.data(), table_host_.size() * 4, st);
    // The host vector must stay unchanged until the async copy ran: it is only rewritten after the logits sync.

    const uint32_t et = emb_.type;
    ok(get_rows(x_.as<float>(), emb_.buf.get(), et, ids_.as<int32_t>(), T, d, st), "get_rows");
    for (int32_t l = 0; l < hp.n_layer; ++l) {
      const DevLayer &L = layers_[static_cast<size_t>(l)];
      ok(rmsnorm(xn_.as<float>(), x_.as<float>(), L.attn_norm.as<float>(), T, d, hp.rms_eps, st), "rmsnorm");
      ok(matmul(q_.as<float>(), xn_.as<float>(), L.wq.buf.get(), L.wq.type, T, qd, d, st), "matmul q");
      ok(matmul(k_.as<float>(), xn_.as<float>(), L.wk.buf.get(), L.wk.type, T, kvd, d, st), "matmul k");
      ok(matmul(v_.as<float>(), xn_.as<float>(), L.wv.buf.get(), L.wv.type, T, kvd, d, st), "matmul v");
      ok(rope(q_.as<float>(), pos_.as<int32_t>(), T, nh, hd, hp.rope_theta, st), "rope q");
      ok(rope(k_.as<float>(), pos_.as<int32_t>(), T, nkv, hd, hp.rope_theta, st), "rope k");
      for (size_t gi = 0; gi < groups.size(); ++gi) {
        const auto &idx = groups[gi].second;
        const ViewRef &r = refs[gi * static_cast<size_t>(hp.n_layer) + static_cast<size_t>(l)];
        cpu::PagedKv v = kv.view(groups[gi].first, l);  // geometry; pointers replaced by the device ones
        v.pool = pool_.as<uint8_t>();
        v.block_table = table_dev_.as<int32_t>() + r.offset;
        v.n_slots = r.n_slots;
        const int64_t n = static_cast<int64_t>(idx.size());
        const int32_t first = r.n_slots - static_cast<int32_t>(n);
        bool contiguous = true;
        for (int64_t j = 1; j < n; ++j) contiguous = contiguous && idx[static_cast<size_t>(j)] == idx[0] + j;
        // Contiguous items (a prefill, or one token per sequence) run as one call; scattered ones item by item.
        const int64_t step = contiguous ? n : 1;
        for (int64_t j0 = 0; j0 < n; j0 += step) {
          const int64_t t = idx[static_cast<size_t>(j0)];
          ok(kv_append(v, first + static_cast<int32_t>(j0), k_.as<float>() + t * kvd, v_.as<float>() + t * kvd, step, st), "kv_append");
          ok(paged_attention(att_.as<float>() + t * qd, q_.as<float>() + t * qd, step, static_cast<int32_t>(nh), v,
                             first + static_cast<int32_t>(j0) + 1, scale, nullptr, nullptr, st),
             "paged_attention");
        }
      }
      ok(matmul(o_.as<float>(), att_.as<float>(), L.wo.buf.get(), L.wo.type, T, d, qd, st), "matmul o");
      ok(add_inplace(x_.as<float>(), o_.as<float>(), T * d, st), "add");
      ok(rmsnorm(xn_.as<float>(), x_.as<float>(), L.ffn_norm.as<float>(), T, d, hp.rms_eps, st), "rmsnorm");
      ok(matmul(g_.as<float>(), xn_.as<float>(), L.gate.buf.get(), L.gate.type, T, ff, d, st), "matmul gate");
      ok(matmul(u_.as<float>(), xn_.as<float>(), L.up.buf.get(), L.up.type, T, ff, d, st), "matmul up");
      ok(swiglu(g_.as<float>(), g_.as<float>(), u_.as<float>(), T * ff, st), "swiglu");
      ok(matmul(o_.as<float>(), g_.as<float>(), L.down.buf.get(), L.down.type, T, d, ff, st), "matmul down");
      ok(add_inplace(x_.as<float>(), o_.as<float>(), T * d, st), "add");
    }
    ok(rmsnorm(xn_.as<float>(), x_.as<float>(), out_norm_.as<float>(), T, d, hp.rms_eps, st), "rmsnorm");
    if (rows.empty()) {
      stream_->synchronize();
      return;
    }
    // Gather the rows that need logits, then one GEMM for all of them.
    for (size_t r = 0; r < rows.size(); ++r)
      if (cudaMemcpyAsync(xr_.as<float>() + static_cast<int64_t>(r) * d, xn_.as<float>() + rows[r] * d, static_cast<size_t>(d) * 4,
                          cudaMemcpyDeviceToDevice, reinterpret_cast<cudaStream_t>(st)) != cudaSuccess)
        fail(Status::internal, "CUDA row gather failed");
    const DevWeight &ow = model_.tied_output() ? emb_ : out_;
    ok(matmul(logits_.as<float>(), xr_.as<float>(), ow.buf.get(), ow.type, static_cast<int64_t>(rows.size()), V, d, st), "matmul lm_head");
    logits_.download(out, rows.size() * static_cast<size_t>(V) * 4, st);
    stream_->synchronize();
    check_last_error("forward");
  }

 private:
  // Grows the activation buffers to a chunk of T tokens (never shrinks).
  void ensure(int64_t T, int64_t d, int64_t qd, int64_t kvd, int64_t ff, int64_t n_rows, int64_t V) {
    auto grow = [](DeviceBuffer &b, int64_t bytes) {
      if (static_cast<int64_t>(b.bytes()) < bytes) b = DeviceBuffer(static_cast<size_t>(bytes));
    };
    grow(x_, T * d * 4); grow(xn_, T * d * 4); grow(o_, T * d * 4);
    grow(q_, T * qd * 4); grow(att_, T * qd * 4);
    grow(k_, T * kvd * 4); grow(v_, T * kvd * 4);
    grow(g_, T * ff * 4); grow(u_, T * ff * 4);
    grow(ids_, T * 4); grow(pos_, T * 4);
    grow(xr_, std::max<int64_t>(1, n_rows) * d * 4);
    grow(logits_, std::max<int64_t>(1, n_rows) * V * 4);
  }

  const Model &model_;
  int32_t device_;
  std::unique_ptr<StreamOwner> stream_;
  std::vector<DevLayer> layers_;
  DevWeight emb_, out_;
  DeviceBuffer out_norm_;
  int64_t block_bytes_ = 0;
  DeviceBuffer pool_;
  DeviceBuffer x_, xn_, o_, q_, att_, k_, v_, g_, u_, ids_, pos_, xr_, logits_, table_dev_;
  std::vector<int32_t> table_host_;
};

}  // namespace

std::unique_ptr<DeviceForward> make_forward(const Model &model, const KvCache &kv, int32_t device) {
  return std::make_unique<CudaForward>(model, kv, device);
}

}  // namespace cuda
}  // namespace infokv
