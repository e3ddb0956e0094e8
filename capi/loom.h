/*
 * loom.h — the stable C ABI of loom: load a model from the formats people download
 * (safetensors, GGUF, PyTorch .bin, .npy, loom packs), tokenize, prefill, step, sample,
 * generate, embed, and read the load report.
 *
 * Conventions (see docs/c-api.md):
 *  - Pure C99; includes only <stddef.h> and <stdint.h>. Every symbol is loom_*, every
 *    macro LOOM_*. No C++ type and no exception ever crosses this boundary.
 *  - Handles are opaque. Constructors return a loom_status and hand the object back
 *    through an out-parameter; the caller owns it and frees it with the matching
 *    *_free, which accepts NULL.
 *  - Every fallible call returns a loom_status (LOOM_OK == 0; numbers are never reused)
 *    and, when `err` is not NULL, stores a new loom_error the caller frees (or NULL on
 *    success). There is no global error state.
 *  - Params structs begin with `uint32_t struct_size`, are filled by *_params_init(),
 *    and are passed by pointer (NULL means defaults). The library reads only
 *    struct_size bytes, so fields are only ever appended and old callers keep working.
 *    Each loom_X_init(p) below is a macro for loom_X_init_sized(p, sizeof *p), so the
 *    library never writes past the struct the caller was compiled with (FFI hosts call
 *    the _sized form with their struct's size); the function loom_X_init is the 0.1
 *    symbol, which writes the struct as it was in 0.1 and never more.
 *  - Strings and arrays are written into caller buffers; the size needed is reported
 *    through an out-parameter. Pass NULL / 0 to ask for the size. A buffer too small
 *    returns LOOM_ERR_BUFFER_TOO_SMALL (with the size needed set); strings are NUL
 *    terminated when they fit (the reported length excludes the NUL).
 *  - Threads: loom_model and loom_tokenizer are immutable and may be used from any
 *    thread at once. A loom_session or loom_sampler is used by one thread at a time
 *    (it may move between threads). Each function says which rule applies.
 *
 * Versioning: LOOM_VERSION_NUMBER = MAJOR*10000 + MINOR*100 + PATCH is the header's
 * version, loom_version_number() the library's; a host checks that the majors agree.
 * The shared library's SONAME (libloom.so.MAJOR) changes only when the ABI breaks.
 */
#ifndef LOOM_H
#define LOOM_H

#include <stddef.h>
#include <stdint.h>

#define LOOM_VERSION_MAJOR 0
#define LOOM_VERSION_MINOR 1
#define LOOM_VERSION_PATCH 0
#define LOOM_VERSION_NUMBER \
  (LOOM_VERSION_MAJOR * 10000 + LOOM_VERSION_MINOR * 100 + LOOM_VERSION_PATCH)

#if defined(LOOM_STATIC_DEFINE)
#define LOOM_API
#elif defined(LOOM_BUILDING_LIBRARY)
#define LOOM_API __attribute__((visibility("default")))
#else
#define LOOM_API
#endif

#if defined(__GNUC__)
#define LOOM_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define LOOM_DEPRECATED(msg)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- versions, status codes, errors ---------------------------------------------- */

/* The library's version number (LOOM_VERSION_NUMBER encoding). Any thread. */
LOOM_API int32_t loom_version_number(void);
/* "MAJOR.MINOR.PATCH"; a static string. Any thread. */
LOOM_API const char *loom_version_string(void);

typedef int32_t loom_status;
#define LOOM_OK 0
#define LOOM_ERR_IO 1               /* a file could not be opened or read */
#define LOOM_ERR_FORMAT 2           /* a file is malformed */
#define LOOM_ERR_MISSING_TENSOR 3   /* the weights lack a tensor the architecture needs */
#define LOOM_ERR_SHAPE_MISMATCH 4   /* a tensor's shape contradicts the config */
#define LOOM_ERR_UNSUPPORTED 5      /* valid input loom cannot handle (yet) */
#define LOOM_ERR_OUT_OF_MEMORY 6
#define LOOM_ERR_CANCELLED 7        /* a callback asked to stop */
#define LOOM_ERR_INVALID_ARGUMENT 8 /* NULL handle, bad id, bad parameter */
#define LOOM_ERR_INTERNAL 9         /* a bug in loom: please report it */
#define LOOM_ERR_CONTEXT_FULL 10    /* the session's context length is used up */
#define LOOM_ERR_DTYPE_MISMATCH 11
#define LOOM_ERR_NUMERIC 12         /* NaN or infinite logits */
#define LOOM_ERR_BUFFER_TOO_SMALL 13 /* the caller's buffer is too small; size reported */
#define LOOM_ERR_TEMPLATE 14 /* a chat template failed to parse or raised an error */
#define LOOM_ERR_KV_POOL_FULL 15 /* a batch's KV pool has too few free blocks for a sequence */

/* A short, static, stable name for a status ("ok", "io", "format", ...). Any thread. */
LOOM_API const char *loom_status_str(loom_status status);

typedef struct loom_error loom_error;

/* The full message, with file / tensor / byte offset context. Borrowed: valid until
 * loom_error_free. Any thread. */
LOOM_API const char *loom_error_message(const loom_error *err);
LOOM_API loom_status loom_error_status(const loom_error *err);
/* The file, tensor name and byte offset the error is about; "" / -1 when unknown. */
LOOM_API const char *loom_error_file(const loom_error *err);
LOOM_API const char *loom_error_tensor(const loom_error *err);
LOOM_API int64_t loom_error_offset(const loom_error *err);

/* A failed load carries the whole manifest diff: every missing, unexpected, wrongly
 * shaped or wrongly typed tensor, so a host can show the user all of them. */
#define LOOM_PROBLEM_MISSING 0
#define LOOM_PROBLEM_UNEXPECTED 1
#define LOOM_PROBLEM_SHAPE_MISMATCH 2
#define LOOM_PROBLEM_DTYPE_MISMATCH 3
#define LOOM_PROBLEM_TIED_DIFFERS 4
#define LOOM_PROBLEM_DUPLICATE 5
#define LOOM_PROBLEM_SUSPICIOUS_DATA 6 /* a warning in the load report: e.g. byte-swapped values */

typedef struct loom_problem {
  uint32_t struct_size;          /* set by the caller (loom_problem_init) */
  int32_t kind;                  /* LOOM_PROBLEM_* */
  const char *internal_name;     /* "blk.3.attn_k", or "" */
  const char *external_name;     /* as stored in the file, or "" */
  const char *detail;            /* complete human-readable explanation */
  int32_t expected_rank;         /* 0 when not applicable */
  int64_t expected_shape[8];
  int32_t found_rank;
  int64_t found_shape[8];
} loom_problem;

LOOM_API void loom_problem_init(loom_problem *p);
LOOM_API void loom_problem_init_sized(loom_problem *p, size_t size);
#define loom_problem_init(p) loom_problem_init_sized((p), sizeof *(p))
LOOM_API size_t loom_error_problem_count(const loom_error *err);
/* Fills `out` with problem `index`; its strings are borrowed until loom_error_free. */
LOOM_API loom_status loom_error_problem(const loom_error *err, size_t index, loom_problem *out);
LOOM_API void loom_error_free(loom_error *err);

/* ---- models ---------------------------------------------------------------------- */

typedef struct loom_model loom_model;         /* immutable after load; any thread */
typedef struct loom_tokenizer loom_tokenizer; /* immutable; any thread */
typedef struct loom_session loom_session;     /* KV state; one thread at a time */
typedef struct loom_sampler loom_sampler;     /* RNG + history; one thread at a time */

#define LOOM_IO_AUTO 0   /* mmap, or pread streaming on network / FUSE filesystems */
#define LOOM_IO_MMAP 1
#define LOOM_IO_STREAM 2

#define LOOM_DTYPE_KEEP -1 /* as stored */
#define LOOM_DTYPE_F32 0
#define LOOM_DTYPE_F16 1
#define LOOM_DTYPE_BF16 2

#define LOOM_LOG_TRACE 0
#define LOOM_LOG_DEBUG 1
#define LOOM_LOG_INFO 2
#define LOOM_LOG_WARN 3
#define LOOM_LOG_ERROR 4
#define LOOM_LOG_OFF 5

/* Called on the loading thread. Return 0 to cancel: the load fails with
 * LOOM_ERR_CANCELLED and frees everything. */
typedef int (*loom_progress_fn)(void *user, float fraction, const char *tensor);
/* May be called from loom's worker threads, one message at a time. */
typedef void (*loom_log_fn)(void *user, int32_t level, const char *message);

typedef struct loom_load_params {
  uint32_t struct_size;
  int32_t io_mode;        /* LOOM_IO_* */
  int32_t target_dtype;   /* LOOM_DTYPE_KEEP or LOOM_DTYPE_F32/F16/BF16 for matrices */
  int32_t strict;         /* nonzero: unexpected tensors fail the load */
  int32_t n_threads;      /* conversion workers; 0: 2 */
  int32_t load_tokenizer; /* nonzero (default): load the model's tokenizer too */
  loom_progress_fn progress;
  void *progress_user;
  loom_log_fn log;        /* NULL: loom's default stderr logger */
  void *log_user;
  int32_t log_level;      /* LOOM_LOG_*; default INFO */
  /* -- appended: repacking (older, smaller structs leave it OFF) -- */
  int32_t repack;         /* LOOM_REPACK_OFF (default): weights as stored, zero-copy where
                             they fit; LOOM_REPACK_AUTO: copy matrices into the layout their
                             kernel reads fastest where this CPU has one (the
                             quantized types, f32, f16, bf16; AVX-512 or AVX2) */
} loom_load_params;
#define LOOM_REPACK_OFF 0
#define LOOM_REPACK_AUTO 1

LOOM_API void loom_load_params_init(loom_load_params *p);
LOOM_API void loom_load_params_init_sized(loom_load_params *p, size_t size);
#define loom_load_params_init(p) loom_load_params_init_sized((p), sizeof *(p))
/* Loads a model directory (Hugging Face layout), a .gguf file, a single weight file with
 * config.json beside it, or a loom pack. Any thread. */
LOOM_API loom_status loom_model_load(const char *path, const loom_load_params *params,
                                     loom_model **out, loom_error **err);
LOOM_API void loom_model_free(loom_model *model);

typedef struct loom_model_info {
  uint32_t struct_size;
  int32_t vocab_size;
  int32_t context_length; /* the model's trained maximum */
  int32_t hidden_size;
  int32_t n_layers;
  int32_t n_heads;
  int32_t n_kv_heads;
  int32_t head_dim;
  int32_t bos_id;         /* -1 when none */
  int32_t eos_id;         /* the first end-of-generation id, -1 when none */
  int32_t has_tokenizer;
  const char *architecture; /* borrowed from the model */
  int64_t weight_bytes;
} loom_model_info;

LOOM_API void loom_model_info_init(loom_model_info *info);
LOOM_API void loom_model_info_init_sized(loom_model_info *info, size_t size);
#define loom_model_info_init(info) loom_model_info_init_sized((info), sizeof *(info))
LOOM_API loom_status loom_model_get_info(const loom_model *model, loom_model_info *info);
/* All end-of-generation ids into `ids` (capacity `cap`); `n` gets the count. */
LOOM_API loom_status loom_model_eos_ids(const loom_model *model, int32_t *ids, size_t cap, size_t *n);
/* The load report as JSON (trace != 0: every tensor's source and conversion). */
LOOM_API loom_status loom_model_load_report(const loom_model *model, int32_t trace, char *buf,
                                            size_t cap, size_t *len);

/* ---- tokenizers ------------------------------------------------------------------ */

#define LOOM_TOKENIZE_ADD_SPECIAL 1u   /* add BOS/EOS as the tokenizer's template does */
#define LOOM_TOKENIZE_PARSE_SPECIAL 2u /* special-token text becomes those tokens */
#define LOOM_DETOKENIZE_SKIP_SPECIAL 1u

/* A tokenizer alone, without weights: a tokenizer.json, a model directory or a .gguf
 * (vocab-only GGUFs too). Any thread. */
LOOM_API loom_status loom_tokenizer_load(const char *path, loom_tokenizer **out, loom_error **err);
/* A new handle on the model's tokenizer (it stays valid after loom_model_free).
 * LOOM_ERR_UNSUPPORTED when the model came without one. */
LOOM_API loom_status loom_model_tokenizer(const loom_model *model, loom_tokenizer **out, loom_error **err);
LOOM_API void loom_tokenizer_free(loom_tokenizer *tok);
LOOM_API int32_t loom_tokenizer_vocab_size(const loom_tokenizer *tok);
/* `text` is `len` bytes (need not be NUL terminated). ids == NULL: *n_ids = count needed. */
LOOM_API loom_status loom_tokenize(const loom_tokenizer *tok, const char *text, size_t len,
                                   uint32_t flags, int32_t *ids, size_t cap, size_t *n_ids,
                                   loom_error **err);
LOOM_API loom_status loom_detokenize(const loom_tokenizer *tok, const int32_t *ids, size_t n_ids,
                                     uint32_t flags, char *buf, size_t cap, size_t *len,
                                     loom_error **err);
/* The text of one token as it appears inside decoded text (may be a partial UTF-8
 * character for byte tokens). */
LOOM_API loom_status loom_token_piece(const loom_tokenizer *tok, int32_t id, char *buf, size_t cap,
                                      size_t *len, loom_error **err);

/* ---- sessions -------------------------------------------------------------------- */

/* Forward-pass trace (debugging: find the first stage where two runs, or loom and
 * another engine, diverge). Called on the thread running the pass, after each stage, in
 * order: "embd" (layer -1); per block N, "attn_out" and "ffn_out" (layer N: the residual
 * stream after the attention and after the MLP); then "output_norm" and "logits"
 * (layer -1). `values` is row-major [n_tokens, dim], borrowed for the call only; the
 * final stages see only the rows whose logits are kept (the last one, unless
 * all_logits). Return 0 to go on, nonzero to abandon the pass: loom_prefill / loom_step
 * return LOOM_ERR_CANCELLED with the session's position, cache and logits as they were
 * before the call (loom_generate and loom_embed return it too, after the passes that
 * completed). Tracing slows the pass down. */
typedef int32_t (*loom_trace_fn)(void *user, const char *stage, int32_t layer, int64_t n_tokens,
                                 int64_t dim, const float *values);

typedef struct loom_session_params {
  uint32_t struct_size;
  int32_t context_length; /* 0: the model's, capped at 4096 */
  int32_t n_threads;      /* 0: all hardware threads */
  int32_t kv_dtype;       /* LOOM_DTYPE_F32 (default) or LOOM_DTYPE_F16 */
  int32_t all_logits;     /* nonzero: keep logits for every prefilled position */
  /* -- appended: forward-pass trace (NULL: none; older, smaller structs get none) -- */
  loom_trace_fn trace;
  void *trace_user;
} loom_session_params;

LOOM_API void loom_session_params_init(loom_session_params *p);
LOOM_API void loom_session_params_init_sized(loom_session_params *p, size_t size);
#define loom_session_params_init(p) loom_session_params_init_sized((p), sizeof *(p))
/* Allocates the KV cache. The session keeps the model alive. Any thread. */
LOOM_API loom_status loom_session_create(const loom_model *model, const loom_session_params *params,
                                         loom_session **out, loom_error **err);
LOOM_API void loom_session_free(loom_session *session);
/* Forgets every token. Per-session. */
LOOM_API loom_status loom_session_reset(loom_session *session);
/* Forgets tokens from `position` on. Per-session. */
LOOM_API loom_status loom_session_rollback(loom_session *session, int32_t position, loom_error **err);
LOOM_API int32_t loom_session_position(const loom_session *session);
LOOM_API int32_t loom_session_context_length(const loom_session *session);
LOOM_API int64_t loom_session_kv_cache_bytes(const loom_session *session);
/* Feeds tokens in one batched pass. On error the session is unchanged. Per-session. */
LOOM_API loom_status loom_prefill(loom_session *session, const int32_t *tokens, size_t n,
                                  loom_error **err);
/* Feeds one token. Per-session. */
LOOM_API loom_status loom_step(loom_session *session, int32_t token, loom_error **err);
/* Logits after the last token fed (n_vocab floats), or NULL before any. Borrowed: valid
 * until the next prefill / step / reset / rollback on this session. */
LOOM_API const float *loom_logits(const loom_session *session, size_t *n_vocab);
/* all_logits sessions: logits after token `index` of the last prefill. */
LOOM_API const float *loom_logits_at(const loom_session *session, size_t index, size_t *n_vocab);
LOOM_API size_t loom_logit_rows(const loom_session *session);

/* ---- sampling -------------------------------------------------------------------- */

typedef struct loom_sampler_params {
  uint32_t struct_size;
  float temperature;        /* <= 0: greedy (argmax, ties to the lowest id) */
  int32_t top_k;            /* <= 0: off */
  float top_p;              /* >= 1: off */
  float min_p;              /* <= 0: off */
  float repeat_penalty;     /* 1: off */
  float frequency_penalty;
  float presence_penalty;
  int32_t penalty_last_n;   /* 0: off, -1: whole history */
  uint64_t seed;
  const int32_t *logit_bias_ids;   /* copied at create; -INFINITY bans a token */
  const float *logit_bias_values;
  size_t n_logit_bias;
} loom_sampler_params;

typedef struct loom_candidate {
  int32_t id;
  float logit;
  float p; /* softmax of the logits (recomputed by loom after a stage changes them) */
} loom_candidate;

/* A custom stage: sees the candidates after the built-in filters and may rewrite ids,
 * logits and probabilities and shrink *n (never grow it, never to 0). Return 0 to go
 * on, nonzero to fail the sample with LOOM_ERR_CANCELLED. */
typedef int32_t (*loom_sampler_stage_fn)(void *user, loom_candidate *candidates, size_t *n,
                                         const int32_t *history, size_t n_history);

LOOM_API void loom_sampler_params_init(loom_sampler_params *p);
LOOM_API void loom_sampler_params_init_sized(loom_sampler_params *p, size_t size);
#define loom_sampler_params_init(p) loom_sampler_params_init_sized((p), sizeof *(p))
LOOM_API loom_status loom_sampler_create(const loom_sampler_params *params, loom_sampler **out,
                                         loom_error **err);
LOOM_API void loom_sampler_free(loom_sampler *sampler);
/* Appends a custom stage (runs after the built-in ones, before the pick). */
LOOM_API loom_status loom_sampler_add_stage(loom_sampler *sampler, const char *name,
                                            loom_sampler_stage_fn fn, void *user);
/* Picks the next token from the session's last logits and records it in the sampler's
 * history. It does not feed the token to the session (call loom_step). */
LOOM_API loom_status loom_sample(loom_session *session, loom_sampler *sampler, int32_t *token,
                                 loom_error **err);
/* Records a token chosen by the host (e.g. the prompt) for the penalties. */
LOOM_API loom_status loom_sampler_accept(loom_sampler *sampler, int32_t token);
/* Clears the history and reseeds. */
LOOM_API loom_status loom_sampler_reset(loom_sampler *sampler);

/* ---- generation and embeddings --------------------------------------------------- */

#define LOOM_STOP_EOS 0
#define LOOM_STOP_STRING 1
#define LOOM_STOP_MAX_TOKENS 2
#define LOOM_STOP_CANCELLED 3
#define LOOM_STOP_CONTEXT_FULL 4

/* Streams text as it becomes final; return 0 to stop. `token` is -1 for text released
 * at the end. The text is borrowed for the call. */
typedef int32_t (*loom_text_fn)(void *user, const char *text, size_t len, int32_t token);

typedef struct loom_generate_params {
  uint32_t struct_size;
  int32_t max_tokens;              /* default 128 */
  const char *const *stop_strings; /* matched across tokens, never emitted */
  size_t n_stop_strings;
  uint32_t tokenize_flags;         /* LOOM_TOKENIZE_*; default ADD_SPECIAL */
  int32_t continue_session;        /* nonzero: append to the session instead of resetting */
  loom_text_fn on_text;
  void *user;
} loom_generate_params;

typedef struct loom_generate_result {
  uint32_t struct_size;
  int32_t prompt_tokens;
  int32_t generated_tokens;
  int32_t stop_reason;      /* LOOM_STOP_* */
  double prompt_seconds;
  double generate_seconds;
} loom_generate_result;

LOOM_API void loom_generate_params_init(loom_generate_params *p);
LOOM_API void loom_generate_params_init_sized(loom_generate_params *p, size_t size);
#define loom_generate_params_init(p) loom_generate_params_init_sized((p), sizeof *(p))
LOOM_API void loom_generate_result_init(loom_generate_result *r);
LOOM_API void loom_generate_result_init_sized(loom_generate_result *r, size_t size);
#define loom_generate_result_init(r) loom_generate_result_init_sized((r), sizeof *(r))
/* Tokenizes `prompt` with the model's tokenizer, prefills, then samples and steps until
 * an end-of-generation token, a stop string, max_tokens or the callback stops it.
 * `result` may be NULL. Per-session (and per-sampler). */
LOOM_API loom_status loom_generate(loom_session *session, loom_sampler *sampler, const char *prompt,
                                   size_t prompt_len, const loom_generate_params *params,
                                   loom_generate_result *result, loom_error **err);

#define LOOM_POOL_MEAN 0
#define LOOM_POOL_LAST 1
/* The pooled final hidden state of `tokens` (a fresh context: resets the session),
 * L2-normalized when `normalize` is nonzero. out == NULL: *dim = size needed. */
LOOM_API loom_status loom_embed(loom_session *session, const int32_t *tokens, size_t n,
                                int32_t pooling, int32_t normalize, float *out, size_t cap,
                                size_t *dim, loom_error **err);

/* ---- generation defaults (generation_config.json) ------------------------------- */

/* Applies the model's generation defaults — the values its generation_config.json sets —
 * to caller structs already filled by loom_sampler_params_init /
 * loom_generate_params_init (or by the caller): temperature (0 when do_sample is
 * false), top_k, top_p and repeat_penalty (the file's repetition_penalty) into
 * `sampler`; max_tokens (max_new_tokens, else max_length) into `gen`. A value the file
 * does not set leaves the caller's field as it was, so a host applies this first and
 * its own explicit choices after. Fields beyond a struct's struct_size are not touched.
 * Either struct may be NULL. The eos_token_id of the file is already among
 * loom_model_eos_ids. The load report (loom_model_load_report) names each value's
 * source under "generation". Any thread. */
LOOM_API loom_status loom_model_generation_defaults(const loom_model *model, loom_sampler_params *sampler,
                                                    loom_generate_params *gen);

/* ---- chat templates ---- */

/* A conversation turn; both strings NUL-terminated UTF-8. */
typedef struct loom_chat_message {
  const char *role;    /* "system", "user", "assistant", "tool", ... */
  const char *content;
} loom_chat_message;

typedef struct loom_chat_template_params {
  uint32_t struct_size;
  int32_t add_generation_prompt;  /* default 1: end with the assistant's turn header */
  const char *bos_token;          /* NULL: the model's */
  const char *eos_token;          /* NULL: the model's */
  const char *tools_json;         /* NULL: none; else a JSON array, the `tools` variable */
  const char *extra_context_json; /* NULL: none; else a JSON object of more variables */
} loom_chat_template_params;

LOOM_API void loom_chat_template_params_init(loom_chat_template_params *p);
LOOM_API void loom_chat_template_params_init_sized(loom_chat_template_params *p, size_t size);
#define loom_chat_template_params_init(p) loom_chat_template_params_init_sized((p), sizeof *(p))
/* Renders `template_source` (NULL: the model's own template; LOOM_ERR_UNSUPPORTED when it
 * has none) over the conversation, byte for byte as transformers' apply_chat_template
 * renders it (Jinja2, trim_blocks and lstrip_blocks on). `model` may be NULL when
 * template_source is given. The text goes into `buf` (NUL-terminated) with the size-query
 * convention: buf == NULL sets *len to the length and returns LOOM_OK; a buffer smaller
 * than *len + 1 gives LOOM_ERR_BUFFER_TOO_SMALL with *len set. A syntax error, an error
 * the template raises (raise_exception) or a sandbox limit gives LOOM_ERR_TEMPLATE with
 * the template's message. Any thread; the model is only read. */
LOOM_API loom_status loom_chat_apply_template(const loom_model *model, const char *template_source,
                                             const loom_chat_message *messages, size_t n_messages,
                                             const loom_chat_template_params *params, char *buf,
                                             size_t cap, size_t *len, loom_error **err);
/* The same with the conversation as a JSON array of message objects (tool calls etc.). */
LOOM_API loom_status loom_chat_apply_template_json(const loom_model *model, const char *template_source,
                                                  const char *messages_json,
                                                  const loom_chat_template_params *params, char *buf,
                                                  size_t cap, size_t *len, loom_error **err);


/* ---- chat sessions --------------------------------------------------------------- */

/* A multi-turn conversation on one session: the message history, rendered with a chat
 * template (the model's own by default) before each reply. Each reply feeds the session
 * only the tokens its KV cache does not already hold (the longest common prefix of the
 * new rendering's ids and the session's is kept), so a turn prefills just what is new.
 * The chat borrows the session: the session must outlive the chat, and the host should
 * not feed it in between (or the chat recomputes from the start). One thread at a time,
 * like its session. See docs/chat.md. */
typedef struct loom_chat loom_chat;

typedef struct loom_chat_params {
  uint32_t struct_size;
  const char *template_source;    /* NULL: the model's chat template */
  const char *bos_token;          /* NULL: the tokenizer's BOS text */
  const char *eos_token;          /* NULL: the tokenizer's EOS text */
  const char *extra_context_json; /* NULL: none; a JSON object of more template variables */
} loom_chat_params;

typedef struct loom_chat_result {
  uint32_t struct_size;
  int32_t prompt_tokens;    /* the rendered conversation, in tokens */
  int32_t reused_tokens;    /* of those, already in the KV cache */
  int32_t prefilled_tokens; /* of those, fed this turn */
  int32_t generated_tokens;
  int32_t stop_reason;      /* LOOM_STOP_* */
  double prompt_seconds;
  double generate_seconds;
} loom_chat_result;

LOOM_API void loom_chat_params_init(loom_chat_params *p);
LOOM_API void loom_chat_params_init_sized(loom_chat_params *p, size_t size);
#define loom_chat_params_init(p) loom_chat_params_init_sized((p), sizeof *(p))
LOOM_API void loom_chat_result_init(loom_chat_result *r);
LOOM_API void loom_chat_result_init_sized(loom_chat_result *r, size_t size);
#define loom_chat_result_init(r) loom_chat_result_init_sized((r), sizeof *(r))
/* LOOM_ERR_UNSUPPORTED when no template is given and the model has none (a base model);
 * LOOM_ERR_TEMPLATE when the template does not compile. Any thread. */
LOOM_API loom_status loom_chat_create(loom_session *session, const loom_chat_params *params,
                                      loom_chat **out, loom_error **err);
LOOM_API void loom_chat_free(loom_chat *chat);
/* Appends a message without generating (a system prompt, few-shot turns, a tool result). */
LOOM_API loom_status loom_chat_add_message(loom_chat *chat, const char *role, const char *content,
                                           loom_error **err);
/* Replaces the system message (inserted first when there is none); NULL or "" removes it. */
LOOM_API loom_status loom_chat_set_system(loom_chat *chat, const char *content, loom_error **err);
/* Forgets the history; the KV cache is still reused where the next rendering allows. */
LOOM_API loom_status loom_chat_clear(loom_chat *chat);
LOOM_API size_t loom_chat_message_count(const loom_chat *chat);
/* Role and content of message `index` (size-query convention for each; either buffer may
 * be NULL). */
LOOM_API loom_status loom_chat_get_message(const loom_chat *chat, size_t index, char *role, size_t role_cap,
                                           size_t *role_len, char *content, size_t content_cap,
                                           size_t *content_len, loom_error **err);
/* The template's rendering of the history. */
LOOM_API loom_status loom_chat_render(const loom_chat *chat, int32_t add_generation_prompt, char *buf,
                                      size_t cap, size_t *len, loom_error **err);
/* Generates the assistant's reply to the history, streaming it through params->on_text,
 * and appends it to the history (read it back with loom_chat_get_message). From `params`
 * max_tokens, stop_strings and on_text apply; tokenize_flags and continue_session are
 * ignored (the chat decides). On an error the history is unchanged. `result` may be NULL. */
LOOM_API loom_status loom_chat_reply(loom_chat *chat, loom_sampler *sampler,
                                     const loom_generate_params *params, loom_chat_result *result,
                                     loom_error **err);

/* ---- batches (continuous batching over a paged KV cache) ---------------------------- */

/* Many sequences over one model, advanced together: each loom_batch_decode runs one
 * forward pass over every sequence's pending tokens (prompt chunks and single decode
 * tokens mixed, within a per-pass token budget), so each weight is read once for all of
 * them. The KV cache is paged: fixed-size blocks from one pool sized at creation.
 * loom_batch_fork makes a sequence that shares its parent's blocks (copy on write), so a
 * common prefix is stored and computed once.
 *
 * Batch invariance: a sequence's logits are bit-identical whether it runs alone (a
 * loom_session fed the same tokens) or with others, in one pass or token by token.
 *
 * Errors: every call that fails changes nothing; the batch stays usable. loom_batch_feed
 * is where KV blocks are reserved: a full pool fails it with LOOM_ERR_KV_POOL_FULL, whose
 * message names the sequence and the blocks needed and free; the host removes, rolls
 * back or trims a sequence and retries.
 *
 * Ownership: the batch keeps its model alive (loom_model_free may come first) and owns
 * its KV pool. Threads: one thread at a time per batch (it may move between threads);
 * many batches and sessions may share one model. See docs/c-api.md. */
typedef struct loom_batch loom_batch;
typedef int64_t loom_seq_id; /* ids are never reused within a batch */

typedef struct loom_batch_params {
  uint32_t struct_size;
  int32_t max_sequences;  /* live sequences at once; default 16 */
  int32_t context_length; /* per sequence; 0: the model's, capped at 4096 */
  int32_t block_tokens;   /* positions per KV block; default 16 */
  int64_t pool_tokens;    /* the pool's size in tokens (rounded up to whole blocks), */
  int64_t pool_bytes;     /* else in bytes (rounded down); both 0: max_sequences contexts */
  int32_t kv_dtype;       /* LOOM_DTYPE_F32 (default) or LOOM_DTYPE_F16 */
  int32_t token_budget;   /* tokens per pass (decode tokens first); default 512 */
  int32_t n_threads;      /* 0: all hardware threads */
  /* Asked on the calling thread before each pass; nonzero cancels: loom_batch_decode
   * returns LOOM_ERR_CANCELLED and nothing changes. NULL: never. */
  int32_t (*cancel)(void *user);
  void *cancel_user;
} loom_batch_params;

/* What one loom_batch_decode did. */
typedef struct loom_batch_pass {
  uint32_t struct_size;
  int32_t tokens;    /* tokens in the pass (0: nothing was pending) */
  int32_t n_ready;   /* sequences whose pending tokens are all done: logits readable */
  int32_t n_partial; /* sequences that got a prompt chunk and still have tokens pending */
} loom_batch_pass;

typedef struct loom_batch_stats {
  uint32_t struct_size;
  int32_t sequences;
  int32_t block_tokens;
  int64_t blocks_total;
  int64_t blocks_used;   /* referenced by at least one sequence */
  int64_t blocks_shared; /* referenced by two or more (forks) */
  int64_t blocks_free;
  int64_t bytes_total;   /* the pool's allocation */
  int64_t bytes_used;
  int64_t passes;        /* decodes that ran a pass */
  int64_t tokens_processed;
} loom_batch_stats;

LOOM_API void loom_batch_params_init(loom_batch_params *p);
LOOM_API void loom_batch_params_init_sized(loom_batch_params *p, size_t size);
#define loom_batch_params_init(p) loom_batch_params_init_sized((p), sizeof *(p))
LOOM_API void loom_batch_pass_init(loom_batch_pass *r);
LOOM_API void loom_batch_pass_init_sized(loom_batch_pass *r, size_t size);
#define loom_batch_pass_init(r) loom_batch_pass_init_sized((r), sizeof *(r))
LOOM_API void loom_batch_stats_init(loom_batch_stats *s);
LOOM_API void loom_batch_stats_init_sized(loom_batch_stats *s, size_t size);
#define loom_batch_stats_init(s) loom_batch_stats_init_sized((s), sizeof *(s))
/* Allocates the KV pool (one allocation) and the batch's threads. Any thread. */
LOOM_API loom_status loom_batch_create(const loom_model *model, const loom_batch_params *params,
                                       loom_batch **out, loom_error **err);
LOOM_API void loom_batch_free(loom_batch *batch);
/* A new empty sequence. LOOM_ERR_INVALID_ARGUMENT when max_sequences are live. */
LOOM_API loom_status loom_batch_add(loom_batch *batch, loom_seq_id *out, loom_error **err);
/* Queues `n` tokens (n > 0) after the sequence's position — a prompt or one sampled
 * token — and reserves their KV blocks; the next decodes process them. all_logits
 * nonzero: keep logits after every one of them (scoring), else only after the last.
 * LOOM_ERR_CONTEXT_FULL past the context length, LOOM_ERR_KV_POOL_FULL when the pool
 * cannot hold them. */
LOOM_API loom_status loom_batch_feed(loom_batch *batch, loom_seq_id seq, const int32_t *tokens, size_t n,
                                     int32_t all_logits, loom_error **err);
/* A new sequence holding the parent's tokens and sharing its KV blocks; the parent must
 * have no pending tokens. Its logits are copied from the parent. */
LOOM_API loom_status loom_batch_fork(loom_batch *batch, loom_seq_id parent, loom_seq_id *out,
                                     loom_error **err);
/* Forgets positions from `position` on, and any pending tokens. */
LOOM_API loom_status loom_batch_rollback(loom_batch *batch, loom_seq_id seq, int32_t position,
                                         loom_error **err);
/* Removes positions [begin, end) and shifts the later ones down; their cached keys are
 * re-rotated (RoPE), so the sequence goes on as if fed the kept tokens (within f32
 * rounding). No pending tokens allowed. LOOM_ERR_KV_POOL_FULL when shared blocks must
 * be copied and the pool is full. */
LOOM_API loom_status loom_batch_trim(loom_batch *batch, loom_seq_id seq, int32_t begin, int32_t end,
                                     loom_error **err);
/* Frees the sequence and its blocks (shared blocks stay with their other holders). */
LOOM_API loom_status loom_batch_remove(loom_batch *batch, loom_seq_id seq, loom_error **err);
/* When `needed` more positions would not fit the context, drops the oldest positions
 * after the first `keep_first` (at least half of those after them) with
 * loom_batch_trim; `dropped` (may be NULL) gets the count, 0 when it already fits. */
LOOM_API loom_status loom_batch_context_shift(loom_batch *batch, loom_seq_id seq, int32_t needed,
                                              int32_t keep_first, int32_t *dropped, loom_error **err);
/* One forward pass over the pending tokens of every sequence (single decode tokens
 * first, then prompt chunks in order of id, within token_budget). `result` may be NULL.
 * Nothing pending: LOOM_OK with result->tokens == 0. */
LOOM_API loom_status loom_batch_decode(loom_batch *batch, loom_batch_pass *result, loom_error **err);
/* The sequences the last successful loom_batch_decode made ready (size-query convention:
 * ids == NULL sets *n). Removed sequences are left out. */
LOOM_API loom_status loom_batch_ready(const loom_batch *batch, loom_seq_id *ids, size_t cap, size_t *n);
/* Logits after the sequence's last processed token (n_vocab floats), or NULL for an
 * unknown id, pending tokens or none yet. Borrowed: valid until the next call that
 * changes this batch (feed, decode, fork, rollback, trim, remove, context_shift). */
LOOM_API const float *loom_batch_logits(const loom_batch *batch, loom_seq_id seq, size_t *n_vocab);
/* all_logits feeds: logits after token `index` of that feed; NULL out of range. */
LOOM_API const float *loom_batch_logits_at(const loom_batch *batch, loom_seq_id seq, size_t index,
                                           size_t *n_vocab);
LOOM_API size_t loom_batch_logit_rows(const loom_batch *batch, loom_seq_id seq); /* 0: unknown id */
LOOM_API int32_t loom_batch_position(const loom_batch *batch, loom_seq_id seq); /* -1: unknown id */
LOOM_API int32_t loom_batch_pending(const loom_batch *batch, loom_seq_id seq);  /* -1: unknown id */
LOOM_API int32_t loom_batch_contains(const loom_batch *batch, loom_seq_id seq); /* 1 or 0 */
LOOM_API int32_t loom_batch_context_length(const loom_batch *batch);           /* -1: NULL */
/* Picks the next token from the sequence's logits with the host's sampler (one per
 * sequence, for its own history and RNG) and records it in that sampler's history. It
 * does not feed the token (call loom_batch_feed). */
LOOM_API loom_status loom_batch_sample(loom_batch *batch, loom_seq_id seq, loom_sampler *sampler,
                                       int32_t *token, loom_error **err);
/* The step after a pass for every sequence it made ready at once: draws the next token
 * of each sequence in the last successful loom_batch_decode's ready list with the
 * sampler sampler_of(user, seq) returns (each sequence its own; NULL skips it), records
 * it in that sampler's history and, with feed_back nonzero, feeds it to its sequence so
 * the next loom_batch_decode continues them all (an end-of-sequence token too: remove or
 * roll back a sequence you end). ids[i] and tokens[i] receive the drawn pairs in ready
 * order (both may be NULL when nothing is to be drawn) and *n their count; cap (at least
 * loom_batch_pass.n_ready suffices) smaller
 * than the count fails with LOOM_ERR_BUFFER_TOO_SMALL and *n set, nothing drawn.
 * Refused before anything is drawn: a removed sequence, no room for one more position
 * with feed_back (LOOM_ERR_CONTEXT_FULL / LOOM_ERR_KV_POOL_FULL naming the sequence). A
 * sampler that fails (non-finite logits, a host stage), or with feed_back picks an id
 * outside the vocabulary, stops the call before anything is fed; the samplers that drew before it keep their token in their history. */
typedef loom_sampler *(*loom_batch_sampler_fn)(void *user, loom_seq_id seq);
LOOM_API loom_status loom_batch_sample_ready(loom_batch *batch, loom_batch_sampler_fn sampler_of, void *user,
                                             int32_t feed_back, loom_seq_id *ids, int32_t *tokens, size_t cap,
                                             size_t *n, loom_error **err);
/* The pool's and the scheduler's counters (named _get_ because loom_batch_stats is the
 * struct's name). */
LOOM_API loom_status loom_batch_get_stats(const loom_batch *batch, loom_batch_stats *stats);

/* ---- speculative decoding ------------------------------------------------------- */

/* A drafter cheaply proposes the next tokens; loom_generate_speculative verifies them all
 * in one forward pass of the target and keeps the prefix the target's own sampler agrees
 * with, plus one token of the target's, so one pass over the target's weights yields
 * several tokens. Greedy output is token for token plain greedy decoding's; with
 * sampling, each token follows the target's distribution after the whole sampler chain
 * (rejection sampling: Leviathan et al. 2023). See docs/speculative.md.
 *
 * Ownership: the caller owns a drafter and frees it with loom_drafter_free; a draft-model
 * drafter keeps its model alive and owns its own KV cache. Threads: a drafter is used by
 * one generation at a time (like a session). */
typedef struct loom_drafter loom_drafter;

typedef struct loom_draft_model_params {
  uint32_t struct_size;
  int32_t context_length; /* the draft's KV cache; 0: the target session's (capped by the draft's) */
  int32_t kv_dtype;       /* LOOM_DTYPE_F32 (default) or LOOM_DTYPE_F16 */
  float min_confidence;   /* stop drafting when the draft's best candidate is less likely; default 0 */
} loom_draft_model_params;

LOOM_API void loom_draft_model_params_init(loom_draft_model_params *p);
LOOM_API void loom_draft_model_params_init_sized(loom_draft_model_params *p, size_t size);
#define loom_draft_model_params_init(p) loom_draft_model_params_init_sized((p), sizeof *(p))
/* A draft model: `draft` must share `target`'s vocabulary (LOOM_ERR_INVALID_ARGUMENT
 * naming both sizes, or the first token id whose text differs). A draft with more weight
 * bytes than the target is allowed, with a warning (loom_drafter_warnings). Any thread. */
LOOM_API loom_status loom_drafter_create_model(const loom_model *draft, const loom_model *target,
                                               const loom_draft_model_params *params, loom_drafter **out,
                                               loom_error **err);
/* The quantized copy of a model as its draft, without a second file: every projection and
 * embedding matrix converted in memory to `dtype` ("q4_k", "q8_0", "gq4_32", "f16", ...);
 * the copy shares the target's norms, config and tokenizer. It converts on the calling
 * thread and as many workers as the target was loaded with (loom_load_params.n_threads);
 * the copy is the same whatever their number. Free it with loom_model_free. Any thread. */
LOOM_API loom_status loom_model_draft_copy(const loom_model *target, const char *dtype, loom_model **out,
                                           loom_error **err);
/* Prompt lookup: the longest recent suffix of the context (max_ngram down to min_ngram
 * tokens; 0, 0 for the defaults 3, 1) that occurred before proposes what followed it. */
LOOM_API loom_status loom_drafter_create_lookup(int32_t max_ngram, int32_t min_ngram, loom_drafter **out,
                                                loom_error **err);

/* A host drafter: writes up to `max_draft` tokens continuing `context` (the prompt and
 * every token generated so far) into `draft` and their count into *n_draft. Return 0 to
 * go on, nonzero to stop the generation with LOOM_ERR_CANCELLED. A count above max_draft
 * or an id outside the vocabulary fails it with LOOM_ERR_INVALID_ARGUMENT; the session
 * then holds the tokens accepted before, nothing else. Called on the generating thread. */
typedef int32_t (*loom_draft_fn)(void *user, const int32_t *context, size_t n_context, int32_t *draft,
                                 size_t max_draft, size_t *n_draft);
/* Optional: how many of the `drafted` tokens last proposed the target kept. */
typedef void (*loom_draft_accepted_fn)(void *user, size_t accepted, size_t drafted);
LOOM_API loom_status loom_drafter_create_callback(const char *name, loom_draft_fn draft,
                                                  loom_draft_accepted_fn accepted, void *user,
                                                  loom_drafter **out, loom_error **err);
LOOM_API void loom_drafter_free(loom_drafter *drafter);
/* The drafter's warnings, one per line ("" when none); size-query convention. */
LOOM_API loom_status loom_drafter_warnings(const loom_drafter *drafter, char *buf, size_t cap, size_t *len);

typedef struct loom_speculative_params {
  uint32_t struct_size;
  int32_t max_draft;      /* k: drafted tokens per target pass at most, 1..64; default 8 */
  int32_t adaptive;       /* default 1: k per round from the acceptance rate and measured
                             costs, down to plain decoding when drafting does not pay */
  int32_t probe_interval; /* adaptive: plain rounds between probes of one draft; default 16 */
  float smoothing;        /* weight of the newest round in the running estimates, (0, 1]; default 0.1 */
} loom_speculative_params;

typedef struct loom_speculative_stats {
  uint32_t struct_size;
  int64_t drafted;         /* tokens proposed and verified */
  int64_t accepted;        /* of those, kept */
  int64_t target_passes;   /* forward passes of the target while generating */
  int64_t rounds_drafting; /* passes that verified at least one draft */
  double acceptance;       /* accepted / drafted (0 when nothing was drafted) */
  double tokens_per_target_pass;
  double draft_seconds;
  double verify_seconds;
  int32_t last_draft_length;
} loom_speculative_stats;

LOOM_API void loom_speculative_params_init(loom_speculative_params *p);
LOOM_API void loom_speculative_params_init_sized(loom_speculative_params *p, size_t size);
#define loom_speculative_params_init(p) loom_speculative_params_init_sized((p), sizeof *(p))
LOOM_API void loom_speculative_stats_init(loom_speculative_stats *s);
LOOM_API void loom_speculative_stats_init_sized(loom_speculative_stats *s, size_t size);
#define loom_speculative_stats_init(s) loom_speculative_stats_init_sized((s), sizeof *(s))
/* loom_generate with an optional drafter (NULL: plain decoding, counted the same way):
 * the same params, streaming, stop reasons and result, and for a greedy sampler the same
 * tokens. `spec`, `result` and `stats` may be NULL. k outside 1..64 is
 * LOOM_ERR_INVALID_ARGUMENT. When the context runs out the accepted tokens are kept and
 * the stop reason is LOOM_STOP_CONTEXT_FULL. Per-session (and per-sampler, per-drafter). */
LOOM_API loom_status loom_generate_speculative(loom_session *session, loom_sampler *sampler, const char *prompt,
                                               size_t prompt_len, const loom_generate_params *params,
                                               loom_drafter *drafter, const loom_speculative_params *spec,
                                               loom_generate_result *result, loom_speculative_stats *stats,
                                               loom_error **err);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_H */
