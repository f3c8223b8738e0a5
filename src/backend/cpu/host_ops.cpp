// DeviceOps on the CPU: host memory, memcpy for copies, the cpu:: kernels (multithreaded where they take a pool)
// and the weights used in place from the model's mapping (quantised and f32 types) or through its grouped copy (f16/bf16).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

#include <vector>

#include "backend/device_ops.hpp"
#include "kernels/thread_pool.hpp"
#include "model/model.hpp"
#include "util/error.hpp"

namespace infokv {

namespace {

class HostOps final : public DeviceOps {
 public:
  HostOps(ThreadPool *pool, bool like_device) : pool_(pool), like_device_(like_device) {}
  std::string name() const override { return "cpu"; }
  int64_t free_memory() const override {
    const long pages = ::sysconf(_SC_AVPHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : -1;
  }
  // The host pool is committed lazily, so it is sized from the context (capped at 1 GiB), not from free memory.
  double default_pool_fraction() const override { return 0.0; }
  int64_t chunk_invariant_from() const override { return cpu::chunk_invariant_from(); }

  void *alloc(size_t bytes) override {
    void *p = std::malloc(bytes);
    if (p == nullptr) fail(Status::out_of_memory, "cannot allocate " + std::to_string(bytes) + " bytes");
    return p;
  }
  void release(void *p) noexcept override { std::free(p); }
  void upload(void *dst, const void *host, size_t bytes) override { std::memcpy(dst, host, bytes); }
  void download(void *host, const void *src, size_t bytes) override {
    if (!like_device_) {
      std::memcpy(host, src, bytes);
      return;
    }
    // As on a GPU stream: the bytes are those at this point of the stream, but they reach `host` only at sync();
    // until then `host` holds a poison pattern (NaN as f32 and f64), so code that reads a download early fails.
    const uint8_t *b = static_cast<const uint8_t *>(src);
    pending_.push_back(Pending{host, std::vector<uint8_t>(b, b + bytes)});
    std::memset(host, 0xFF, bytes);
  }
  void copy(void *dst, const void *src, size_t bytes) override { std::memmove(dst, src, bytes); }
  void zero(void *dst, size_t bytes) override { std::memset(dst, 0, bytes); }
  void sync() override {
    for (const Pending &p : pending_) std::memcpy(p.host, p.bytes.data(), p.bytes.size());
    pending_.clear();
  }

  // Quantised and f32 matrices are used in place from the mapping; f16/bf16 ones through the model's grouped copy
  // (cpu::group_rows, made once per model and shared by its sessions), whose products are faster in prefill and sum
  // every output in one order whatever the batch.
  DevMatrix matrix(const Model &model, const Weight &w) override {
    if (!cpu::weight_type_supported(w.type)) fail(Status::unsupported, "weight type of " + w.name + " is not supported on the CPU");
    const uint32_t grouped = cpu::grouped_type(w.type);
    if (grouped == 0) return DevMatrix{w.data, w.type, w.rows, w.cols};
    const int64_t elems = cpu::grouped_elems(w.rows, w.cols);
    const void *g = model.derived(w, static_cast<size_t>(elems) * 2, [&](void *dst) {
      cpu::group_rows(static_cast<uint16_t *>(dst), static_cast<const uint16_t *>(w.data), w.rows, w.cols, pool_);
    });
    return DevMatrix{g, grouped, w.rows, w.cols};
  }
  const float *vec(const std::vector<float> &v) override { return v.data(); }
  std::unique_ptr<KvStore> make_kv_store(const PagedKv &geometry, int64_t n_blocks) override {
    return like_device_ ? make_ops_kv_store(*this, geometry, n_blocks) : make_host_kv_store(geometry, n_blocks);
  }

  void get_rows(float *out, const DevMatrix &emb, const int32_t *ids, int64_t n, int64_t d) override {
    for (int64_t t = 0; t < n; ++t)
      if (!cpu::get_row(out + t * d, emb.data, emb.type, ids[t], d)) fail(Status::unsupported, "unsupported embedding type");
  }
  void rmsnorm(float *out, const float *x, const float *w, int64_t n, int64_t d, float eps) override {
    split(n, d, [&](int64_t a, int64_t b) { cpu::rmsnorm(out + a * d, x + a * d, w, b - a, d, eps); });
  }
  void rope(float *x, const int32_t *pos, int64_t n, int64_t n_heads, int64_t head_dim, const double *inv_freq) override {
    const int64_t half = head_dim / 2, row = n_heads * head_dim;
    const float *cs = rope_table(pos, n, half, inv_freq);  // [n][half][cos, sin]
    split(n, row, [&](int64_t a, int64_t b) { cpu::rope_apply(x + a * row, cs + a * half * 2, b - a, n_heads, head_dim); });
  }
  void set_decode_batch(bool on) override { decode_batch_ = on; }
  void matmul(float *out, const float *x, const DevMatrix &w, int64_t n) override {
    const cpu::RowsIndependent rows(decode_batch_);
    if (!cpu::matmul(out, x, w.data, w.type, n, w.rows, w.cols, pool_)) fail(Status::unsupported, "unsupported weight type");
  }
  void matmul_parts(float *const *outs, const float *x, const DevMatrix *const *ws, int count, int64_t n) override {
    cpu::MatmulPart parts[4];
    if (count < 1 || count > 4) return DeviceOps::matmul_parts(outs, x, ws, count, n);
    for (int i = 0; i < count; ++i) {
      if (ws[i]->cols != ws[0]->cols) return DeviceOps::matmul_parts(outs, x, ws, count, n);
      parts[i] = {outs[i], ws[i]->data, ws[i]->type, ws[i]->rows};
    }
    const cpu::RowsIndependent rows(decode_batch_);
    if (!cpu::matmul_parts(parts, count, x, n, ws[0]->cols, pool_)) fail(Status::unsupported, "unsupported weight type");
  }
  void swiglu(float *out, const float *gate, const float *up, int64_t n) override {
    split(n, 1, [&](int64_t a, int64_t b) { cpu::swiglu(out + a, gate + a, up + a, b - a); });
  }
  void add_inplace(float *x, const float *y, int64_t n) override {
    split(n, 1, [&](int64_t a, int64_t b) { cpu::add_inplace(x + a, y + a, b - a); });
  }
  void add_bias(float *x, const float *b, int64_t n, int64_t d) override { cpu::add_bias(x, b, n, d); }
  void kv_append(const PagedKv &kv, int32_t first_slot, const float *k, const float *v, int64_t n) override {
    cpu::kv_append(kv, first_slot, k, v, n);
  }
  void paged_attention(float *out, const float *q, int64_t n_q, int32_t n_heads, const PagedKv &kv, int32_t visible0,
                       float scale, float *acc, float *acc_count) override {
    cpu::paged_attention(out, q, n_q, n_heads, kv, visible0, scale, acc, acc_count, pool_);
  }
  void kv_append_rows(const PagedKv &kv, const int32_t *slot_addr, const float *k, const float *v, int64_t n) override {
    cpu::kv_append_rows(kv, slot_addr, k, v, n);
  }
  void paged_attention_rows(float *out, const float *q, int64_t n_q, int32_t n_heads, const PagedKv &kv,
                            const int32_t *table_off, const int32_t *vis, int32_t max_vis, float scale) override {
    cpu::paged_attention_rows(out, q, n_q, n_heads, kv, table_off, vis, max_vis, scale, pool_);
  }
  void attention_probs_mean(float *probs, const float *q, int64_t n_q, int32_t n_heads, const PagedKv &kv,
                            int32_t visible0, float scale) override {
    cpu::attention_probs_mean(probs, q, n_q, n_heads, kv, visible0, scale);
  }
  void topk_entropy_rows(double *out, const float *logits, int64_t n_rows, int32_t n, int32_t top_k) override {
    // rows are independent: shared by the pool (each row's value does not depend on which thread computes it)
    if (pool_ == nullptr || pool_->size() <= 1 || n_rows < 2) return cpu::topk_entropy_rows(out, logits, n_rows, n, top_k);
    pool_->parallel_for(n_rows, 1, [&](int64_t r0, int64_t r1) {
      cpu::topk_entropy_rows(out + r0, logits + r0 * n, r1 - r0, n, top_k);
    });
  }
  void rep_change_rows(float *out, const float *hidden, int64_t n_layer, int64_t n, int64_t d) override {
    cpu::rep_change_rows(out, hidden, n_layer, n, d);
  }
  void kv_move_slots(const PagedKv &kv, const int32_t *moves, int64_t n, uint8_t *scratch) override {
    cpu::kv_move_slots(kv, moves, n, scratch);
  }

 private:
  struct Pending {
    void *host;
    std::vector<uint8_t> bytes;
  };
  // A row- or element-wise kernel over n items of `per_item` floats is shared among the pool's threads when there
  // is enough of it (a prefill's rows; a decode step's one row stays on the calling thread). Each row or element is
  // computed the same way whatever the split, so the results' bits do not depend on the thread count.
  template <class F>
  void split(int64_t n, int64_t per_item, F &&fn) {
    constexpr int64_t kMinFloats = int64_t{1} << 15;
    if (pool_ == nullptr || pool_->size() <= 1 || n * per_item < 2 * kMinFloats) {
      fn(int64_t{0}, n);
      return;
    }
    pool_->parallel_for(n, std::max<int64_t>(1, kMinFloats / per_item), fn);
  }

  // The cos/sin of the last batch's positions: every layer rotates its queries and keys at the same positions with the
  // same frequencies, so they are computed once per batch, not twice per layer. Reused only when positions and
  // frequencies are equal to those it was made from.
  const float *rope_table(const int32_t *pos, int64_t n, int64_t half, const double *inv_freq) {
    const bool same = rope_pos_.size() == static_cast<size_t>(n) && rope_freq_.size() == static_cast<size_t>(half) &&
                      std::equal(rope_pos_.begin(), rope_pos_.end(), pos) &&
                      std::equal(rope_freq_.begin(), rope_freq_.end(), inv_freq);
    if (!same) {
      rope_pos_.assign(pos, pos + n);
      rope_freq_.assign(inv_freq, inv_freq + half);
      rope_cs_.resize(static_cast<size_t>(n * half * 2));
      cpu::rope_angles(rope_cs_.data(), pos, n, half, inv_freq);
    }
    return rope_cs_.data();
  }

  ThreadPool *pool_;
  bool decode_batch_ = false;  // set_decode_batch: the chunk running is a decode step of several sequences
  bool like_device_;
  std::vector<int32_t> rope_pos_;
  std::vector<double> rope_freq_;
  std::vector<float> rope_cs_;
  std::vector<Pending> pending_;  // downloads not yet delivered (like_device_)
};

}  // namespace

std::unique_ptr<DeviceOps> make_host_ops(ThreadPool *pool, bool like_device) {
  return std::make_unique<HostOps>(pool, like_device);
}

}  // namespace infokv
