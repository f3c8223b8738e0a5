#include "cli/report.hpp"

#include <algorithm>

#include "cli/json.hpp"

namespace infokv {
namespace cli {

std::string kv_json(const Session &s, int32_t seq) {
  const SeqInfo info = s.info(seq);
  const KvStats st = s.kv().stats();
  JsonObject o;
  const Compressor::Bound b = s.compressor().bound(seq);
  o.integer("bytes", info.bytes)
      .integer("uncompressed_bytes", info.uncompressed_bytes)
      .integer("budget_tokens", b.budget)
      .integer("slack_tokens", b.slack)
      .integer("blocks_used", info.blocks)
      .ints("tokens_kept_per_layer", info.kept_per_layer)
      .integer("logical_length", info.length)
      .integer("pool_blocks_total", st.blocks_total)
      .integer("pool_blocks_used", st.blocks_used)
      .integer("pool_bytes_used", st.bytes_used)
      .integer("block_bytes", st.block_bytes)
      .integer("block_size", s.kv().config().block_size)
      .str("dtype", kv_dtype_name(s.kv().config().dtype));
  return o.dump();
}

// Protected spans of `seq`, checked against the cache itself: is every protected position still held in every
// layer? And the tokens released to keep protection within the budget. Empty when it has no spans and released none.
std::string protected_json(const Session &session, int32_t seq) {
  if (session.compressor().spans(seq).empty() && session.compressor().state(seq).protected_released == 0) return "";
  const SeqCache &sc = session.kv().seq(seq);
  bool all = true;
  std::string spans = "[";
  for (const ProtectedSpan &sp : session.compressor().spans(seq)) {
    spans += (spans.size() > 1 ? "," : "") + std::string("[") + std::to_string(sp.begin) + "," + std::to_string(sp.end) + "]";
    if (sp.fair) continue;
    const int64_t end = std::min<int64_t>(sp.end, sc.length);
    for (const LayerSlots &L : sc.layers) {
      const auto lo = std::lower_bound(L.pos.begin(), L.pos.end(), sp.begin);
      const auto hi = std::lower_bound(L.pos.begin(), L.pos.end(), end);
      all = all && (hi - lo) == std::max<int64_t>(0, end - sp.begin);
    }
  }
  JsonObject pj;
  pj.raw("spans", spans + "]")
      .integer("tokens", session.compressor().protected_tokens(seq))
      .boolean("kept_in_every_layer", all)
      .integer("released", session.compressor().state(seq).protected_released);
  return pj.dump();
}

}  // namespace cli
}  // namespace infokv
