/* The public header compiled as strict C99 (-std=c99 -Wall -Wextra -pedantic -Werror): it must declare everything
 * with C types only, and the options INIT macros must be valid C99 initialisers. Compiled, never run. */
#include <infokv/infokv.h>

#include <stddef.h>

int32_t infokv_header_c99_probe(void);

typedef void (*generic_fn)(void);

static int32_t cb(void *user_data, int32_t token, const char *text, size_t text_len) {
  (void)user_data;
  (void)text;
  return token < 0 && text_len == 0;
}

int32_t infokv_header_c99_probe(void) {
  ikv_session_options so = IKV_SESSION_OPTIONS_INIT;
  ikv_sampler_options sa = IKV_SAMPLER_OPTIONS_INIT;
  /* the version-2 field takes a string literal without a cast, and a version-1 caller's size is expressible */
  const size_t v1_size = offsetof(ikv_session_options, device);
  so.device = "cpu";
  ikv_token_callback fn = cb;
  /* Every function's type is what its declaration says (taking the address checks the declaration exists). */
  int32_t (*load)(ikv_model **, const char *) = ikv_model_load;
  void (*model_free)(ikv_model *) = ikv_model_free;
  int32_t (*gen)(int32_t *, size_t, size_t *, ikv_session *, int32_t, const int32_t *, size_t, int32_t, ikv_sampler *,
                 ikv_token_callback, void *) = ikv_generate;
  const char *(*status)(int32_t) = ikv_status_string;
  int32_t (*pressure)(int64_t *, double *, const ikv_session *, int32_t) = ikv_seq_pressure_estimate;
  int32_t (*auto_report)(int32_t *, int64_t *, int64_t *, double *, double *, const ikv_session *, int32_t) =
      ikv_seq_auto_report;
  int32_t (*auto_layer)(int32_t *, int32_t *, double *, double *, const ikv_session *, int32_t, int32_t) =
      ikv_seq_auto_layer;
  const char *(*evidence)(int32_t) = ikv_evidence_name;
  generic_fn all[] = {
      (generic_fn)ikv_version_string, (generic_fn)ikv_version_number, (generic_fn)ikv_last_error_message,
      (generic_fn)ikv_model_get_int, (generic_fn)ikv_model_describe, (generic_fn)ikv_tokenize,
      (generic_fn)ikv_detokenize, (generic_fn)ikv_session_options_init, (generic_fn)ikv_session_options_init_version, (generic_fn)ikv_tokenize_ex, (generic_fn)ikv_session_create,
      (generic_fn)ikv_session_free, (generic_fn)ikv_seq_add, (generic_fn)ikv_seq_remove,
      (generic_fn)ikv_seq_fork, (generic_fn)ikv_seq_truncate, (generic_fn)ikv_seq_length,
      (generic_fn)ikv_seq_kept, (generic_fn)ikv_seq_kv_bytes, (generic_fn)ikv_decode,
      (generic_fn)ikv_decode_batch, (generic_fn)ikv_get_logits, (generic_fn)ikv_kv_stat,
      (generic_fn)ikv_seq_protect, (generic_fn)ikv_seq_compress, (generic_fn)ikv_seq_pressure_estimate,
      (generic_fn)ikv_sampler_options_init, (generic_fn)ikv_sampler_options_init_version, (generic_fn)ikv_sampler_create, (generic_fn)ikv_sampler_free,
      (generic_fn)ikv_sample,          (generic_fn)ikv_evidence_name, (generic_fn)ikv_seq_auto_report,
      (generic_fn)ikv_seq_auto_layer,
  };
  (void)all;
  (void)load;
  (void)model_free;
  (void)gen;
  (void)status;
  (void)pressure;
  (void)auto_report;
  (void)auto_layer;
  (void)evidence;
  (void)fn;
  so.max_loss = 0.05; /* version 4: a double */
  return (int32_t)(so.struct_size + sa.struct_size + v1_size) + (so.device != NULL) + IKV_VERSION_NUMBER + IKV_ERR_INTERNAL + IKV_KV_BLOCK_SIZE +
         IKV_MODEL_WEIGHT_BYTES + IKV_POLICY_PYRAMIDKV + IKV_SHAPE_PYRAMID + IKV_POLICY_AUTO + IKV_EVIDENCE_KEY_NORM +
         (so.max_loss > 0.0);
}
