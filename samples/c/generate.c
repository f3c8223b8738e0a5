/*
 * generate.c — a complete infokv program in C99: load a model, stream a continuation of a prompt, and report how
 * much KV cache it used. Uses only the installed header <infokv/infokv.h>.
 *
 * Build (installed library):
 *   cc -std=c99 generate.c $(pkg-config --cflags --libs infokv) -o generate
 * or with CMake: see ../cmake_consumer/CMakeLists.txt (find_package(infokv), target infokv::infokv).
 *
 * Run:
 *   ./generate [MODEL.gguf] [PROMPT] [MAX_TOKENS] [TEMPERATURE] [DEVICE]
 * MODEL defaults to $INFOKV_MODELS_DIR/stories260K/stories260K.gguf, PROMPT to "Once upon a time", MAX_TOKENS to
 * 64, TEMPERATURE to 0 (greedy: the same text every run), DEVICE to "cpu" ("cuda", "cuda:N" or "auto"; "cuda"
 * without a GPU fails with IKV_ERR_NO_DEVICE). The text goes to stdout, the accounting to stderr.
 */
#include <infokv/infokv.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Called by ikv_generate once per token with the text that token completed (never half a UTF-8 character). */
static int32_t print_piece(void *user_data, int32_t token, const char *text, size_t text_len) {
  size_t *n_pieces = (size_t *)user_data;
  (void)token;
  fwrite(text, 1, text_len, stdout);
  fflush(stdout);
  ++*n_pieces;
  return 0; /* non-zero would stop generation (ikv_generate then returns IKV_ERR_CANCELLED) */
}

static int fail(const char *what, int32_t status) {
  fprintf(stderr, "generate: %s failed: %s (%s)\n", what, ikv_status_string(status), ikv_last_error_message());
  return 1;
}

int main(int argc, char **argv) {
  char default_path[4096];
  const char *model_path = argc > 1 ? argv[1] : NULL;
  const char *prompt = argc > 2 ? argv[2] : "Once upon a time";
  const int32_t max_tokens = argc > 3 ? (int32_t)atoi(argv[3]) : 64;
  const float temperature = argc > 4 ? (float)atof(argv[4]) : 0.0f;
  const char *device = argc > 5 ? argv[5] : "cpu";
  ikv_model *model = NULL;
  ikv_session *session = NULL;
  ikv_sampler *sampler = NULL;
  ikv_session_options so = IKV_SESSION_OPTIONS_INIT;
  ikv_sampler_options sa = IKV_SAMPLER_OPTIONS_INIT;
  int32_t *tokens = NULL;
  size_t n_tokens = 0, n_generated = 0, n_pieces = 0;
  int64_t seq_bytes = 0, blocks_used = 0, blocks_total = 0, block_bytes = 0, length = 0;
  int32_t st;
  int rc = 1;

  if (model_path == NULL) {
    const char *dir = getenv("INFOKV_MODELS_DIR");
    if (dir == NULL || *dir == '\0') {
      fprintf(stderr, "usage: %s MODEL.gguf [PROMPT] [MAX_TOKENS] [TEMPERATURE] [DEVICE]\n"
                      "  (or set INFOKV_MODELS_DIR to the folder holding stories260K/)\n", argv[0]);
      return 2;
    }
    snprintf(default_path, sizeof default_path, "%s/stories260K/stories260K.gguf", dir);
    model_path = default_path;
  }
  if (ikv_version_number() != IKV_VERSION_NUMBER)
    fprintf(stderr, "generate: warning: built against infokv %s, running with %s\n", IKV_VERSION_STRING,
            ikv_version_string());

  if ((st = ikv_model_load(&model, model_path)) != IKV_OK) return fail("loading the model", st);

  /* Tokenise with the size-query protocol: ask for the count, then fill. */
  st = ikv_tokenize(NULL, 0, &n_tokens, model, prompt, strlen(prompt), 1);
  if (st != IKV_OK && st != IKV_ERR_BUFFER_TOO_SMALL) { fail("tokenizing", st); goto done; }
  tokens = (int32_t *)malloc((n_tokens > 0 ? n_tokens : 1) * sizeof *tokens);
  if (tokens == NULL) { fprintf(stderr, "generate: out of memory\n"); goto done; }
  if ((st = ikv_tokenize(tokens, n_tokens, &n_tokens, model, prompt, strlen(prompt), 1)) != IKV_OK) {
    fail("tokenizing", st);
    goto done;
  }

  so.kv_dtype = IKV_KV_F16; /* half the memory of f32; the default */
  so.device = device;       /* read during ikv_session_create only: argv may be used as it is */
  if ((st = ikv_session_create(&session, model, &so)) != IKV_OK) { fail("creating the session", st); goto done; }
  sa.temperature = temperature;
  sa.seed = 42;
  if ((st = ikv_sampler_create(&sampler, &sa)) != IKV_OK) { fail("creating the sampler", st); goto done; }

  fputs(prompt, stdout);
  st = ikv_generate(NULL, 0, &n_generated, session, 0, tokens, n_tokens, max_tokens, sampler, print_piece, &n_pieces);
  fputs("\n", stdout);
  if (st != IKV_OK) { fail("generating", st); goto done; }

  /* KV accounting: what this sequence holds, and the pool it lives in. */
  ikv_seq_length(&length, session, 0);
  ikv_seq_kv_bytes(&seq_bytes, session, 0);
  ikv_kv_stat(&blocks_used, session, IKV_KV_STAT_BLOCKS_USED);
  ikv_kv_stat(&blocks_total, session, IKV_KV_STAT_BLOCKS_TOTAL);
  ikv_kv_stat(&block_bytes, session, IKV_KV_STAT_BLOCK_BYTES);
  fprintf(stderr, "prompt tokens %lu, generated %lu, sequence length %lld\n", (unsigned long)n_tokens,
          (unsigned long)n_generated, (long long)length);
  fprintf(stderr, "kv: sequence holds %lld bytes; pool uses %lld of %lld blocks of %lld bytes\n", (long long)seq_bytes,
          (long long)blocks_used, (long long)blocks_total, (long long)block_bytes);
  rc = 0;

done:
  free(tokens);
  ikv_sampler_free(sampler);
  ikv_session_free(session);
  ikv_model_free(model);
  return rc;
}
