// Session::forward on a device backend: the same chunking, grouping and slot reservation as the CPU path, with
// the per-chunk work handed to DeviceForward. Compression channels (window queries, attention scores, entropy)
// are not produced here: Session refuses compression on a device (see the constructor).
#include <algorithm>
#include <map>

#include "session/session.hpp"
#include "util/error.hpp"

namespace infokv {

void Session::forward_device(const std::vector<BatchToken> &items, const std::vector<int32_t> &positions,
                             std::vector<float> &out_logits, const std::vector<size_t> &logit_rows) {
  const size_t V = static_cast<size_t>(model_->hparams().n_vocab);
  out_logits.assign(logit_rows.size() * V, 0.0f);
  std::vector<char> row_wanted(items.size(), 0);
  std::vector<size_t> row_slot(items.size(), 0);
  for (size_t r = 0; r < logit_rows.size(); ++r) {
    row_wanted[logit_rows[r]] = 1;
    row_slot[logit_rows[r]] = r;
  }
  const size_t ub = static_cast<size_t>(opts_.ubatch);
  std::vector<int32_t> tokens;
  std::vector<float> lg;
  for (size_t c0 = 0; c0 < items.size(); c0 += ub) {
    const size_t c1 = std::min(items.size(), c0 + ub);
    std::map<int32_t, std::vector<int64_t>> by_seq;
    for (size_t i = c0; i < c1; ++i) by_seq[items[i].seq].push_back(static_cast<int64_t>(i - c0));
    ForwardGroups groups(by_seq.begin(), by_seq.end());
    for (const auto &g : groups) {
      std::vector<int32_t> pos;
      for (int64_t t : g.second) pos.push_back(positions[c0 + static_cast<size_t>(t)]);
      kv_->append_slots(g.first, pos.data(), static_cast<int32_t>(pos.size()));
    }
    tokens.clear();
    for (size_t i = c0; i < c1; ++i) tokens.push_back(items[i].token);
    std::vector<int64_t> rows;
    for (size_t i = c0; i < c1; ++i)
      if (row_wanted[i]) rows.push_back(static_cast<int64_t>(i - c0));
    lg.assign(rows.size() * V, 0.0f);
    device_->forward_chunk(tokens.data(), positions.data() + c0, static_cast<int64_t>(c1 - c0), groups, *kv_, rows, lg.data());
    for (size_t r = 0; r < rows.size(); ++r) {
      const size_t i = c0 + static_cast<size_t>(rows[r]);
      std::copy_n(lg.begin() + static_cast<int64_t>(r * V), V, out_logits.begin() + static_cast<int64_t>(row_slot[i] * V));
    }
  }
}

}  // namespace infokv
