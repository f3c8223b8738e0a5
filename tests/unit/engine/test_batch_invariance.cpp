// Same answers under load: on a quantised model (SmolLM2-135M Q4_1, whose CPU matmuls pick kernels by the number
// of tokens), conversations decoded together in the engine's batches get, token for token, the very logits they get
// alone (cpu::RowsIndependent for decode steps of several sequences), up to 15 at a time.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "support/smollm2_model.hpp"

using namespace infokv;

namespace {

std::vector<std::vector<float>> run_alone_or_together(const std::shared_ptr<const Model> &m,
                                                      const std::vector<std::vector<int32_t>> &prompts, bool together) {
  EngineOptions o;
  o.session.n_threads = 2;
  o.max_batch = 15;
  o.assume_prefill_tokens_per_s = 1000;
  o.assume_disk_bytes_per_s = 1e9;
  Engine e(m, o);
  std::vector<std::vector<float>> logits(prompts.size());
  std::vector<int64_t> ids;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ids.push_back(e.open());
    if (together || i == 0) e.submit(ids.back(), {prompts[i], 6, {}, {}});
  }
  size_t next = 1;
  for (int guard = 0; guard < 1000 && (e.busy() || next < prompts.size()); ++guard) {
    if (!e.busy() && !together) {
      e.submit(ids[next], {prompts[next], 6, {}, {}});
      ++next;
    }
    for (const TokenEvent &ev : e.step()) {
      const size_t i = static_cast<size_t>(ev.conversation - ids[0]);
      logits[i].insert(logits[i].end(), ev.logits->begin(), ev.logits->end());
    }
    if (together) next = prompts.size();
  }
  return logits;
}

TEST(BatchInvariance, ConversationsDecodedTogetherGetTheLogitsTheyGetAlone) {
  REQUIRE_SMOLLM2(m);
  const char *texts[] = {"The capital of France is", "Once upon a time, a little robot", "Water boils at",
                         "My favourite colour is", "The quick brown fox", "In 1492, Columbus",
                         "Photosynthesis turns light into", "The best way to learn a language is",
                         "Cats and dogs are", "The moon is made of", "To bake bread you need", "Rain falls when"};
  std::vector<std::vector<int32_t>> prompts;
  for (const char *t : texts) prompts.push_back(m->tokenizer().encode(t, true));
  const auto alone = run_alone_or_together(m, prompts, false);
  const auto together = run_alone_or_together(m, prompts, true);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(alone[i].size(), together[i].size()) << texts[i];
    EXPECT_TRUE(alone[i] == together[i]) << "conversation '" << texts[i] << "' changed with its batch";
  }
}

}  // namespace
