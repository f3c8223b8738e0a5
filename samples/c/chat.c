/*
 * chat.c — a chat in C99 with a compressed cache: each turn is appended to the same sequence in the model's own
 * template (ikv_chat_add), the reply streams (ikv_chat_reply), and the system prompt stays protected through every
 * compression (the default, IKV_CHAT_PROTECT_SYSTEM). Uses only the installed header <infokv/infokv.h>.
 *
 * Build:  cc -std=c99 chat.c $(pkg-config --cflags --libs infokv) -o chat
 * Run:    ./chat MODEL.gguf ["question" ...]     (a chat model: SmolLM2-135M-Instruct, Llama 3, Qwen)
 * Each argument after the model is one user turn; the replies go to stdout, the KV accounting to stderr.
 */
#include <infokv/infokv.h>

#include <stdio.h>
#include <string.h>

static int32_t print_piece(void *user_data, int32_t token, const char *text, size_t text_len) {
  (void)user_data;
  (void)token;
  fwrite(text, 1, text_len, stdout);
  fflush(stdout);
  return 0;
}

static int fail(const char *what, int32_t status) {
  fprintf(stderr, "chat: %s failed: %s (%s)\n", what, ikv_status_string(status), ikv_last_error_message());
  return 1;
}

int main(int argc, char **argv) {
  static const char *const default_turns[] = {"What is the capital of France?", "And of Italy?"};
  const char *const *turns = argc > 2 ? (const char *const *)(argv + 2) : default_turns;
  const int n_turns = argc > 2 ? argc - 2 : 2;
  const char *system = "You are a geography teacher. Answer in one short sentence.";
  ikv_model *model = NULL;
  ikv_session *session = NULL;
  ikv_sampler *sampler = NULL;
  int32_t st, format = 0;
  int rc = 1, i;
  if (argc < 2) {
    fprintf(stderr, "usage: chat MODEL.gguf [\"question\" ...]\n");
    return 2;
  }
  if ((st = ikv_model_load(&model, argv[1])) != IKV_OK) return fail("ikv_model_load", st);
  if ((st = ikv_chat_format(&format, model)) != IKV_OK || format == IKV_CHAT_FORMAT_NONE) {
    fprintf(stderr, "chat: %s has no chat template infokv knows\n", argv[1]);
    goto done;
  }
  {
    /* a small budget: the conversation is compressed whenever it holds more than 64 tokens plus a slack */
    ikv_session_options so = IKV_SESSION_OPTIONS_INIT;
    ikv_sampler_options sa = IKV_SAMPLER_OPTIONS_INIT;
    so.policy = IKV_POLICY_SNAPKV;
    so.budget_tokens = 64;
    sa.temperature = 0; /* greedy */
    if ((st = ikv_session_create(&session, model, &so)) != IKV_OK) { fail("ikv_session_create", st); goto done; }
    if ((st = ikv_sampler_create(&sampler, &sa)) != IKV_OK) { fail("ikv_sampler_create", st); goto done; }
  }
  if ((st = ikv_chat_add(NULL, NULL, session, 0, "system", system, strlen(system), IKV_CHAT_PROTECT_SYSTEM)) != IKV_OK) {
    fail("ikv_chat_add", st);
    goto done;
  }
  for (i = 0; i < n_turns; ++i) {
    size_t made = 0;
    int64_t kv = 0, full = 0, length = 0, budget = 0, slack = 0;
    printf("> %s\n", turns[i]);
    st = ikv_chat_add(NULL, NULL, session, 0, "user", turns[i], strlen(turns[i]), IKV_CHAT_PROTECT_SYSTEM);
    if (st != IKV_OK) { fail("ikv_chat_add", st); goto done; }
    st = ikv_chat_reply(NULL, 0, &made, session, 0, 48, sampler, print_piece, NULL, IKV_CHAT_PROTECT_SYSTEM);
    if (st != IKV_OK) { fail("ikv_chat_reply", st); goto done; }
    ikv_seq_kv_bytes(&kv, session, 0);
    ikv_seq_kv_bytes_uncompressed(&full, session, 0);
    ikv_seq_budget(&budget, &slack, session, 0);
    ikv_seq_length(&length, session, 0);
    printf("\n");
    fprintf(stderr,
            "[turn %d: %zu tokens; the conversation is %lld tokens long, its KV %lld bytes of %lld uncompressed, held to "
            "%lld + %lld tokens per layer]\n",
            i + 1, made, (long long)length, (long long)kv, (long long)full, (long long)budget, (long long)slack);
  }
  rc = 0;
done:
  ikv_sampler_free(sampler);
  ikv_session_free(session);
  ikv_model_free(model);
  return rc;
}
