// The snapshot and config C ABI: buffers with size queries, files, statuses, and state untouched on failure.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "infokv/infokv.h"
#include "support/paths.hpp"

namespace {

struct Handles {
  ikv_model *model = nullptr;
  ikv_session *session = nullptr;
  ikv_sampler *sampler = nullptr;
  ~Handles() {
    ikv_sampler_free(sampler);
    ikv_session_free(session);
    ikv_model_free(model);
  }
};

std::string model_path() { return infokv_test::models_dir() + "/stories260K/stories260K.gguf"; }

std::vector<int32_t> generate(ikv_session *s, int32_t seq, ikv_sampler *sp, const std::vector<int32_t> &prompt, int n) {
  std::vector<int32_t> out(static_cast<size_t>(n));
  size_t count = 0;
  EXPECT_EQ(ikv_generate(out.data(), out.size(), &count, s, seq, prompt.data(), prompt.size(), n, sp, nullptr, nullptr), IKV_OK)
      << ikv_last_error_message();
  out.resize(count);
  return out;
}

TEST(SnapshotCapi, BufferRoundTripContinuesLikeTheOriginal) {
  Handles a;
  ASSERT_EQ(ikv_model_load(&a.model, model_path().c_str()), IKV_OK);
  const char *cfg = R"({"threads": 1, "compression": {"policy": "infokv", "budget_fraction": 0.5, "interval": 4},
                        "sampler": {"temperature": 0.8, "seed": 11}})";
  ikv_config *c = nullptr;
  ASSERT_EQ(ikv_config_from_json(&c, cfg, std::strlen(cfg)), IKV_OK);
  ASSERT_EQ(ikv_session_create_with_config(&a.session, a.model, c), IKV_OK);
  ASSERT_EQ(ikv_sampler_create_with_config(&a.sampler, c), IKV_OK);
  std::vector<int32_t> prompt(64);
  size_t n = 0;
  const char *text = "Once upon a time, there was a little girl";
  ASSERT_EQ(ikv_tokenize(prompt.data(), prompt.size(), &n, a.model, text, std::strlen(text), 1), IKV_OK);
  prompt.resize(n);
  generate(a.session, 0, a.sampler, prompt, 6);
  // ikv_generate leaves its last token undecoded; a caller that saves decodes it first (as the CLI does).
  int64_t len = 0;
  ASSERT_EQ(ikv_seq_length(&len, a.session, 0), IKV_OK);

  size_t size = 0;
  ASSERT_EQ(ikv_session_save_buffer(nullptr, 0, &size, a.session, 0, a.sampler), IKV_ERR_BUFFER_TOO_SMALL);
  std::vector<uint8_t> buf(size);
  ASSERT_EQ(ikv_session_save_buffer(buf.data(), buf.size(), &size, a.session, 0, a.sampler), IKV_OK);
  const std::vector<int32_t> want = generate(a.session, 0, a.sampler, {}, 10);

  Handles b;
  ASSERT_EQ(ikv_model_load(&b.model, model_path().c_str()), IKV_OK);
  ASSERT_EQ(ikv_session_create_with_config(&b.session, b.model, c), IKV_OK);
  ASSERT_EQ(ikv_sampler_create(&b.sampler, nullptr), IKV_OK);
  int32_t ids[2] = {-1, -1};
  size_t count = 0;
  ASSERT_EQ(ikv_session_restore_buffer(ids, 2, &count, b.session, b.sampler, buf.data(), buf.size()), IKV_OK)
      << ikv_last_error_message();
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(ids[0], 1);  // sequence 0 already existed
  EXPECT_EQ(generate(b.session, ids[0], b.sampler, {}, 10), want);
  ikv_config_free(c);
}

TEST(SnapshotCapi, FailuresReturnDistinctStatusesAndChangeNothing) {
  Handles h;
  ASSERT_EQ(ikv_model_load(&h.model, model_path().c_str()), IKV_OK);
  ASSERT_EQ(ikv_session_create(&h.session, h.model, nullptr), IKV_OK);
  const int32_t bos = 1;
  ASSERT_EQ(ikv_decode(h.session, 0, &bos, 1), IKV_OK);
  const std::string path = ::testing::TempDir() + "/capi_snapshot.ikvs";
  ASSERT_EQ(ikv_session_save_file(h.session, 0, nullptr, path.c_str()), IKV_OK);
  EXPECT_EQ(ikv_session_save_file(h.session, 7, nullptr, path.c_str()), IKV_ERR_NOT_FOUND);
  EXPECT_EQ(ikv_session_save_file(h.session, -2, nullptr, path.c_str()), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_session_save_file(h.session, 0, nullptr, "/nonexistent-dir/x.ikvs"), IKV_ERR_IO);

  size_t count = 0;
  int32_t ids[1];
  EXPECT_EQ(ikv_session_restore_file(ids, 1, &count, h.session, nullptr, "/nonexistent-file"), IKV_ERR_IO);
  std::vector<uint8_t> junk(100, 0x42);
  EXPECT_EQ(ikv_session_restore_buffer(ids, 1, &count, h.session, nullptr, junk.data(), junk.size()), IKV_ERR_BAD_SNAPSHOT);
  EXPECT_STRNE(ikv_last_error_message(), "");
  int64_t used = 0, used_after = 0;
  ASSERT_EQ(ikv_kv_stat(&used, h.session, IKV_KV_BLOCKS_USED), IKV_OK);
  // too small an id buffer: the count is reported and nothing restored
  EXPECT_EQ(ikv_session_restore_file(ids, 0, &count, h.session, nullptr, path.c_str()), IKV_ERR_BUFFER_TOO_SMALL);
  EXPECT_EQ(count, 1u);
  ASSERT_EQ(ikv_kv_stat(&used_after, h.session, IKV_KV_BLOCKS_USED), IKV_OK);
  EXPECT_EQ(used_after, used);
  EXPECT_EQ(ikv_session_restore_file(nullptr, 0, &count, h.session, nullptr, path.c_str()), IKV_OK);
  EXPECT_EQ(count, 1u);

  size_t len = 0;
  ASSERT_EQ(ikv_snapshot_inspect(nullptr, 0, &len, path.c_str()), IKV_ERR_BUFFER_TOO_SMALL);
  std::string js(len + 1, '\0');
  ASSERT_EQ(ikv_snapshot_inspect(&js[0], js.size(), &len, path.c_str()), IKV_OK);
  EXPECT_NE(js.find("\"kept_per_layer\":[1,1,1,1,1]"), std::string::npos) << js;
  std::remove(path.c_str());
}

}  // namespace
