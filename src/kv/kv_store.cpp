#include "kv/kv_store.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

#include "util/error.hpp"

namespace infokv {

namespace {

class HostKvStore final : public KvStore {
 public:
  HostKvStore(const PagedKv &g, int64_t n_blocks) : g_(g) {
    size_ = static_cast<size_t>(g.block_stride * n_blocks);
    void *p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) fail(Status::out_of_memory, "cannot reserve a KV pool of " + std::to_string(size_) + " bytes");
    g_.pool = static_cast<uint8_t *>(p);
  }
  ~HostKvStore() override { ::munmap(g_.pool, size_); }

  uint8_t *base() const override { return g_.pool; }
  void copy_block(int32_t dst, int32_t src) override { std::memcpy(at(dst), at(src), static_cast<size_t>(g_.block_stride)); }
  void move_slots(const std::vector<int32_t> &moves, const PagedKv &layer) override {
    const int64_t n = static_cast<int64_t>(moves.size() / 4);
    const int64_t batch = std::min(n, kMoveBatch);
    PagedKv g = g_;
    g.dtype = layer.dtype;
    g.block_size = layer.block_size;
    scratch_.resize(static_cast<size_t>(batch * 2 * g.n_kv_heads * kv_bytes(g.dtype, g.head_dim)));
    for (int64_t i = 0; i < n; i += batch)
      cpu::kv_move_slots(g, moves.data() + 4 * i, std::min(batch, n - i), scratch_.data());
  }
  void read_blocks(const std::vector<int32_t> &ids, uint8_t *out) const override {
    for (size_t i = 0; i < ids.size(); ++i) std::memcpy(out + i * static_cast<size_t>(g_.block_stride), at(ids[i]), static_cast<size_t>(g_.block_stride));
  }
  void write_blocks(const std::vector<int32_t> &ids, const uint8_t *in) override {
    for (size_t i = 0; i < ids.size(); ++i) std::memcpy(at(ids[i]), in + i * static_cast<size_t>(g_.block_stride), static_cast<size_t>(g_.block_stride));
  }
  // Compression frees blocks so that the process holds less: without this the pages stay resident, and a
  // compressed run peaked higher than a full one. Only whole pages inside runs of freed blocks are given back.
  void discard_blocks(const std::vector<int32_t> &ids) override {
    static const int64_t page = ::sysconf(_SC_PAGESIZE);
    size_t i = 0;
    while (i < ids.size()) {
      size_t j = i + 1;
      while (j < ids.size() && ids[j] == ids[j - 1] + 1) ++j;
      const int64_t begin = (static_cast<int64_t>(ids[i]) * g_.block_stride + page - 1) / page * page;
      const int64_t end = static_cast<int64_t>(ids[j - 1] + 1) * g_.block_stride / page * page;
      if (end > begin) ::madvise(g_.pool + begin, static_cast<size_t>(end - begin), MADV_DONTNEED);
      i = j;
    }
  }

 private:
  uint8_t *at(int32_t b) const { return g_.pool + static_cast<int64_t>(b) * g_.block_stride; }
  PagedKv g_;
  size_t size_ = 0;
  std::vector<uint8_t> scratch_;
};

}  // namespace

std::unique_ptr<KvStore> make_host_kv_store(const PagedKv &geometry, int64_t n_blocks) {
  return std::make_unique<HostKvStore>(geometry, n_blocks);
}

}  // namespace infokv
