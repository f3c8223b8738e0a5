#include "snapshot/convert.hpp"

#include <cstring>

#include "compress/policy_table.hpp"
#include "util/error.hpp"
#include "kernels/ops.hpp"

namespace infokv {
namespace snapshot {

// snapshot.fbs spells the policies in capitals; its values must still be the table's (a test checks each name and
// value; here, that no value is missing from the table).
static_assert(static_cast<int>(fb::Policy::MAX) == kPolicyTable.back().schema_value, "a snapshot policy is missing from the table");

flatbuffers::Offset<fb::CompressionParams> to_fb(flatbuffers::FlatBufferBuilder &b, const CompressionConfig &c) {
  return fb::CreateCompressionParams(b, static_cast<fb::Policy>(policy_info(c.policy).schema_value), c.budget_fraction,
                                     c.budget_tokens, c.window, c.pool_kernel_prefill, c.pool_kernel_decode, c.alpha, c.tau,
                                     c.entropy_top_k, c.interval,
                                     static_cast<fb::BudgetShape>(static_cast<int16_t>(c.shape) + 1), c.beta, c.sink,
                                     c.compress_after_prefill, c.max_loss,
                                     static_cast<fb::Question>(static_cast<int16_t>(c.question) + 1));
}

CompressionConfig from_fb(const fb::CompressionParams *p) {
  CompressionConfig c;
  if (p == nullptr) return c;
  // A value this reader does not know is damage or a newer writer: refuse it rather than restore under "none".
  const int pol = static_cast<int>(p->policy());
  if (pol != kPolicySchemaUnspecified) {
    const PolicyInfo *info = policy_by_schema_value(pol);
    if (info == nullptr) fail(Status::bad_snapshot, "snapshot: compression policy value " + std::to_string(pol) + " is not a known policy");
    c.policy = info->kind;
  }
  c.budget_fraction = p->budget_fraction();
  c.budget_tokens = p->budget_tokens();
  c.window = p->window();
  c.pool_kernel_prefill = p->pool_kernel_prefill();
  c.pool_kernel_decode = p->pool_kernel_decode();
  c.alpha = p->alpha();
  c.tau = p->tau();
  c.entropy_top_k = p->entropy_top_k();
  c.interval = p->interval();
  c.shape = p->shape() == fb::BudgetShape::PYRAMID ? BudgetShape::pyramid : BudgetShape::uniform;
  c.beta = p->beta();
  c.sink = p->sink();
  c.compress_after_prefill = p->compress_after_prefill();
  c.max_loss = p->max_loss();
  // Files written before the field served the window's queries (next): they continue as they were recorded.
  const int q = static_cast<int>(p->question());
  if (q < 0 || q > 3) fail(Status::bad_snapshot, "snapshot: compression question value " + std::to_string(q) + " is not known");
  c.question = q == 0 ? Question::next : static_cast<Question>(q - 1);
  return c;
}

void convert_rows(uint8_t *dst, KvDtype dst_t, const uint8_t *src, KvDtype src_t, int64_t n_elems) {
  cpu::convert(dst, dst_t, src, src_t, n_elems);
}

}  // namespace snapshot
}  // namespace infokv
