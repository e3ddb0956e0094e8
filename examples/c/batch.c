/* A C99 host of libloom.so that runs several prompts in one batch: every decode is one
 * forward pass over all of them (continuous batching over a paged KV cache), with greedy
 * sampling, one sampler per sequence. Prints each sequence's text at the end and the
 * batch's stats.
 *   batch MODEL_PATH [--check] [--max-tokens N] PROMPT...
 * --check reruns each prompt alone in a loom_session and exits nonzero unless every
 * sequence's logits (memcmp) and tokens equal its run alone: the kernels are batch
 * invariant, so they must. */
#include <loom.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sequence {
  const char *prompt;
  loom_seq_id id;
  loom_sampler *sampler;
  int32_t *tokens; /* prompt, then generated */
  size_t n_prompt;
  size_t n_tokens;
  float *logits;   /* [max_tokens, n_vocab]: what each generated token was sampled from */
  int done;
} sequence;

static void die(const char *what, loom_status status, loom_error *err) {
  fprintf(stderr, "%s failed (%s): %s\n", what, loom_status_str(status), err ? loom_error_message(err) : "");
  loom_error_free(err);
  exit(1);
}

/* Runs `call`, which must pass &err_ as its loom_error**; exits with the message on error. */
#define CHECK_OK(what, call)                       \
  do {                                             \
    loom_error *err_ = NULL;                       \
    loom_status st_ = (call);                      \
    if (st_ != LOOM_OK) die(what, st_, err_);      \
  } while (0)

static void *xmalloc(size_t n) {
  void *p = malloc(n > 0 ? n : 1);
  if (p == NULL) {
    fputs("out of memory\n", stderr);
    exit(1);
  }
  return p;
}

static int is_eos(int32_t token, const int32_t *eos, size_t n_eos) {
  size_t i;
  for (i = 0; i < n_eos; ++i) {
    if (eos[i] == token) return 1;
  }
  return 0;
}

static loom_sampler *greedy_sampler(void) {
  loom_sampler_params sp;
  loom_sampler *s = NULL;
  loom_sampler_params_init(&sp);
  sp.temperature = 0.0f;
  CHECK_OK("loom_sampler_create", loom_sampler_create(&sp, &s, &err_));
  return s;
}

/* The prompt's ids and the generated ones as one text (special tokens skipped). */
static char *detokenize(const loom_tokenizer *tok, const int32_t *ids, size_t n) {
  size_t len = 0;
  char *text;
  CHECK_OK("loom_detokenize", loom_detokenize(tok, ids, n, LOOM_DETOKENIZE_SKIP_SPECIAL, NULL, 0, &len, &err_));
  text = xmalloc(len + 1);
  CHECK_OK("loom_detokenize", loom_detokenize(tok, ids, n, LOOM_DETOKENIZE_SKIP_SPECIAL, text, len + 1, &len, &err_));
  return text;
}

/* Runs the sequence alone in a fresh session: the same logits bit for bit, the same
 * tokens. Returns 0 when equal. */
static int check_alone(const loom_model *model, const sequence *q, size_t n_vocab, size_t index) {
  loom_session *session = NULL;
  loom_sampler *sampler = greedy_sampler();
  size_t k, n = 0;
  int bad = 0;
  CHECK_OK("loom_session_create", loom_session_create(model, NULL, &session, &err_));
  CHECK_OK("loom_prefill", loom_prefill(session, q->tokens, q->n_prompt, &err_));
  for (k = q->n_prompt; k < q->n_tokens && !bad; ++k) {
    const size_t step = k - q->n_prompt;
    const float *logits = loom_logits(session, &n);
    int32_t token = -1;
    if (logits == NULL || n != n_vocab || memcmp(logits, q->logits + step * n_vocab, n_vocab * sizeof(float)) != 0) {
      printf("check FAILED: sequence %lu: logits before generated token %lu differ from its run alone\n",
             (unsigned long)index, (unsigned long)step);
      bad = 1;
      break;
    }
    CHECK_OK("loom_sample", loom_sample(session, sampler, &token, &err_));
    if (token != q->tokens[k]) {
      printf("check FAILED: sequence %lu: generated token %lu is %d in the batch, %d alone\n", (unsigned long)index,
             (unsigned long)step, (int)q->tokens[k], (int)token);
      bad = 1;
      break;
    }
    CHECK_OK("loom_step", loom_step(session, token, &err_));
  }
  loom_sampler_free(sampler);
  loom_session_free(session);
  return bad;
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : NULL;
  int check = 0;
  int max_tokens = 24;
  int argi;
  size_t n_seqs = 0, i, n_vocab, n_eos = 0, live;
  sequence *seqs;
  loom_model *model = NULL;
  loom_tokenizer *tok = NULL;
  loom_batch *batch = NULL;
  loom_load_params load;
  loom_model_info info;
  loom_batch_params bp;
  loom_batch_stats stats;
  int32_t eos[16];
  loom_seq_id *ready;
  int failures = 0;

  if (path == NULL) {
    fprintf(stderr, "usage: %s MODEL_PATH [--check] [--max-tokens N] PROMPT...\n", argv[0]);
    return 2;
  }
  seqs = xmalloc(sizeof *seqs * (size_t)argc);
  for (argi = 2; argi < argc; ++argi) {
    if (strcmp(argv[argi], "--check") == 0) {
      check = 1;
    } else if (strcmp(argv[argi], "--max-tokens") == 0 && argi + 1 < argc) {
      max_tokens = atoi(argv[++argi]);
    } else {
      memset(&seqs[n_seqs], 0, sizeof seqs[n_seqs]);
      seqs[n_seqs++].prompt = argv[argi];
    }
  }
  if (n_seqs == 0 || max_tokens <= 0) {
    fprintf(stderr, "usage: %s MODEL_PATH [--check] [--max-tokens N] PROMPT...\n", argv[0]);
    return 2;
  }
  if (loom_version_number() / 10000 != LOOM_VERSION_NUMBER / 10000) {
    fprintf(stderr, "libloom %s does not match this header (%d)\n", loom_version_string(), LOOM_VERSION_NUMBER);
    return 1;
  }

  loom_load_params_init(&load);
  load.log_level = LOOM_LOG_WARN;
  CHECK_OK("loom_model_load", loom_model_load(path, &load, &model, &err_));
  CHECK_OK("loom_model_tokenizer", loom_model_tokenizer(model, &tok, &err_));
  loom_model_info_init(&info);
  if (loom_model_get_info(model, &info) != LOOM_OK) return 1;
  n_vocab = (size_t)info.vocab_size;
  if (loom_model_eos_ids(model, eos, sizeof eos / sizeof eos[0], &n_eos) != LOOM_OK) n_eos = 0;

  loom_batch_params_init(&bp);
  bp.max_sequences = (int32_t)n_seqs;
  CHECK_OK("loom_batch_create", loom_batch_create(model, &bp, &batch, &err_));

  /* Every prompt goes in at once; the batch splits them into chunks as its budget says. */
  for (i = 0; i < n_seqs; ++i) {
    sequence *q = &seqs[i];
    const size_t len = strlen(q->prompt);
    size_t n = 0;
    CHECK_OK("loom_tokenize", loom_tokenize(tok, q->prompt, len, LOOM_TOKENIZE_ADD_SPECIAL, NULL, 0, &n, &err_));
    q->tokens = xmalloc(sizeof *q->tokens * (n + (size_t)max_tokens));
    CHECK_OK("loom_tokenize", loom_tokenize(tok, q->prompt, len, LOOM_TOKENIZE_ADD_SPECIAL, q->tokens, n, &n, &err_));
    q->n_prompt = q->n_tokens = n;
    q->logits = xmalloc(sizeof *q->logits * n_vocab * (size_t)max_tokens);
    q->sampler = greedy_sampler();
    CHECK_OK("loom_batch_add", loom_batch_add(batch, &q->id, &err_));
    CHECK_OK("loom_batch_feed", loom_batch_feed(batch, q->id, q->tokens, n, 0, &err_));
  }

  /* Each pass: the sequences it made ready sample their next token and feed it. */
  ready = xmalloc(sizeof *ready * n_seqs);
  live = n_seqs;
  while (live > 0) {
    loom_batch_pass pass;
    size_t n_ready = 0, r;
    loom_batch_pass_init(&pass);
    CHECK_OK("loom_batch_decode", loom_batch_decode(batch, &pass, &err_));
    if (pass.tokens == 0) break; /* nothing pending: every live sequence has ended */
    if (loom_batch_ready(batch, ready, n_seqs, &n_ready) != LOOM_OK) return 1;
    for (r = 0; r < n_ready; ++r) {
      sequence *q = NULL;
      size_t n = 0, step;
      const float *logits;
      int32_t token = -1;
      for (i = 0; i < n_seqs; ++i) {
        if (seqs[i].id == ready[r]) q = &seqs[i];
      }
      if (q == NULL || q->done) continue;
      step = q->n_tokens - q->n_prompt;
      logits = loom_batch_logits(batch, q->id, &n);
      if (logits == NULL || n != n_vocab) {
        fprintf(stderr, "no logits for sequence %ld\n", (long)q->id);
        return 1;
      }
      memcpy(q->logits + step * n_vocab, logits, n_vocab * sizeof(float));
      CHECK_OK("loom_batch_sample", loom_batch_sample(batch, q->id, q->sampler, &token, &err_));
      q->tokens[q->n_tokens++] = token;
      if (is_eos(token, eos, n_eos) || q->n_tokens - q->n_prompt >= (size_t)max_tokens ||
          loom_batch_position(batch, q->id) + 1 >= loom_batch_context_length(batch)) {
        q->done = 1;
        --live;
        continue;
      }
      CHECK_OK("loom_batch_feed", loom_batch_feed(batch, q->id, &token, 1, 0, &err_));
    }
  }

  for (i = 0; i < n_seqs; ++i) {
    char *text = detokenize(tok, seqs[i].tokens, seqs[i].n_tokens);
    printf("[seq %lu] %s\n", (unsigned long)i, text);
    free(text);
  }
  loom_batch_stats_init(&stats);
  if (loom_batch_get_stats(batch, &stats) != LOOM_OK) return 1;
  printf("[batch] %d sequences, %lld passes, %lld tokens, KV blocks of %d: %lld used of %lld (%lld bytes)\n",
         (int)stats.sequences, (long long)stats.passes, (long long)stats.tokens_processed, (int)stats.block_tokens,
         (long long)stats.blocks_used, (long long)stats.blocks_total, (long long)stats.bytes_total);

  if (check) {
    for (i = 0; i < n_seqs; ++i) failures += check_alone(model, &seqs[i], n_vocab, i);
    if (failures == 0) printf("check: all %lu sequences equal their runs alone\n", (unsigned long)n_seqs);
  }

  for (i = 0; i < n_seqs; ++i) {
    loom_sampler_free(seqs[i].sampler);
    free(seqs[i].tokens);
    free(seqs[i].logits);
  }
  free(ready);
  free(seqs);
  loom_batch_free(batch);
  loom_tokenizer_free(tok);
  loom_model_free(model);
  return failures == 0 ? 0 : 1;
}
