// Text and JSON forms of an AutoReport (compress/auto_policy.hpp): what `infokv generate` and `infokv snapshot
// inspect` print about the auto policy's choice.
#pragma once
#include <string>
#include <vector>

#include "compress/auto_policy.hpp"
#include "kernels/paged_kv.hpp"

namespace infokv {

// One line, e.g. "30 layers, mean proxy loss 0.0123, kept 1234 tokens (uniform budget: 1300); evidence:
// window_attention x12, key_norm x8, ..." (kinds by how many layers chose them). Under a quality target the
// parenthesis says "(quality target: max loss 0.05)". "" for an empty report. With the layers' dtypes (`dtypes`,
// one per layer, where they differ from `base`, the cache's), it ends "; q8_0 layers: 12".
std::string auto_report_summary(const AutoReport &r, const std::vector<KvDtype> &dtypes = {}, KvDtype base = KvDtype::f16);

// One line per layer, e.g. "layer 3: key_norm, alpha 1, budget 64, loss 0.0123" (", q8_0" where `dtypes` says so).
std::vector<std::string> auto_report_layer_lines(const AutoReport &r, const std::vector<KvDtype> &dtypes = {});

// A JSON object: {"layers": [{"layer": 0, "evidence": "key_norm", "alpha": 1, "budget": 64, "loss": 0.0123}, ...],
// "loss": ..., "tokens": ..., "uniform_tokens": ..., "max_loss": ...}; "null" for an empty report. Numbers in their
// shortest round-tripping form (floats as floats); a non-finite one as null. With `dtypes` (one per layer) each
// layer also has "dtype": the precision it holds its K/V in ("f16", "q8_0", ...).
std::string auto_report_json(const AutoReport &r, const std::vector<KvDtype> &dtypes = {});

}  // namespace infokv
