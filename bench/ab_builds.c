/* Two builds of libloom.so in one process, their batched passes alternating: an A/B
 * comparison that a machine whose speed drifts from minute to minute cannot spoil, since
 * both builds see the same minutes. Separate runs of two binaries on the 2-vCPU CI kind of
 * machine swing by 20-30%, more than most kernel changes; here each round runs a then
 * b on the same prompts (so each side's run follows the other's) and reports the median
 * of each, after one unmeasured round each. Where each side's model, batch and
 * per-thread buffers land in memory also moves its speed by several percent, so the
 * rounds run in `layouts` groups, each on a new thread with both sides allocated afresh
 * (a's first, then b's first, in turn); b/a is given for each group and as their
 * geometric mean.
 *
 *   loom_ab_builds --a OLD/libloom.so [--b NEW/libloom.so] --model FILE [--batch 8]
 *                  [--prompt 128] [--steps 16] [--rounds 12] [--layouts 4] [--threads 0]
 *                  [--repack off|auto] [--kv f32|f16]
 *
 * --b defaults to this build's library. Each library is opened RTLD_LOCAL (libloom.so
 * exports only its C ABI, so the two copies keep their own kernels, pools and loggers)
 * and loads the model itself. A round, for each side: `batch` sequences get the same
 * `prompt` random token ids (prefill: every pass until all are ready), then `steps`
 * decode passes each feed every sequence its greedy token; the sequences are removed
 * afterwards. Prefill and decode tokens/s are printed per round, then the medians, b/a,
 * and whether the two builds chose the same greedy tokens (they do when their products
 * keep the same bits). Only the C ABI is used: any two builds whose ABI has these
 * functions can be compared, and the libraries' own sanitizer runtime must already be
 * in the process (this program links loom_build_flags for that). */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <loom.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef LOOM_SHARED_LIBRARY
#define LOOM_SHARED_LIBRARY ""
#endif

/* The C ABI functions this program calls, looked up in one library. */
typedef struct Api {
  void *handle;
  const char *path;
  const char *(*version_string)(void);
  const char *(*status_str)(loom_status);
  const char *(*error_message)(const loom_error *);
  void (*error_free)(loom_error *);
  void (*load_params_init_sized)(loom_load_params *, size_t);
  loom_status (*model_load)(const char *, const loom_load_params *, loom_model **, loom_error **);
  void (*model_free)(loom_model *);
  void (*model_info_init_sized)(loom_model_info *, size_t);
  loom_status (*model_get_info)(const loom_model *, loom_model_info *);
  void (*batch_params_init_sized)(loom_batch_params *, size_t);
  void (*batch_pass_init_sized)(loom_batch_pass *, size_t);
  loom_status (*batch_create)(const loom_model *, const loom_batch_params *, loom_batch **, loom_error **);
  void (*batch_free)(loom_batch *);
  loom_status (*batch_add)(loom_batch *, loom_seq_id *, loom_error **);
  loom_status (*batch_feed)(loom_batch *, loom_seq_id, const int32_t *, size_t, int32_t, loom_error **);
  loom_status (*batch_remove)(loom_batch *, loom_seq_id, loom_error **);
  loom_status (*batch_decode)(loom_batch *, loom_batch_pass *, loom_error **);
  const float *(*batch_logits)(const loom_batch *, loom_seq_id, size_t *);
} Api;

/* Where each function pointer of Api lives, and its exported name. */
typedef struct Symbol {
  const char *name;
  size_t offset;
} Symbol;
static const Symbol kSymbols[] = {
    {"loom_version_string", offsetof(Api, version_string)},
    {"loom_status_str", offsetof(Api, status_str)},
    {"loom_error_message", offsetof(Api, error_message)},
    {"loom_error_free", offsetof(Api, error_free)},
    {"loom_load_params_init_sized", offsetof(Api, load_params_init_sized)},
    {"loom_model_load", offsetof(Api, model_load)},
    {"loom_model_free", offsetof(Api, model_free)},
    {"loom_model_info_init_sized", offsetof(Api, model_info_init_sized)},
    {"loom_model_get_info", offsetof(Api, model_get_info)},
    {"loom_batch_params_init_sized", offsetof(Api, batch_params_init_sized)},
    {"loom_batch_pass_init_sized", offsetof(Api, batch_pass_init_sized)},
    {"loom_batch_create", offsetof(Api, batch_create)},
    {"loom_batch_free", offsetof(Api, batch_free)},
    {"loom_batch_add", offsetof(Api, batch_add)},
    {"loom_batch_feed", offsetof(Api, batch_feed)},
    {"loom_batch_remove", offsetof(Api, batch_remove)},
    {"loom_batch_decode", offsetof(Api, batch_decode)},
    {"loom_batch_logits", offsetof(Api, batch_logits)},
};

/* Opens `path` and fills `api`; on failure prints why and returns 0. */
static int open_api(const char *path, Api *api) {
  size_t i;
  memset(api, 0, sizeof *api);
  api->path = path;
  api->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (api->handle == NULL) {
    fprintf(stderr, "cannot open %s: %s\n", path, dlerror());
    return 0;
  }
  for (i = 0; i < sizeof kSymbols / sizeof kSymbols[0]; ++i) {
    void *symbol = dlsym(api->handle, kSymbols[i].name);
    if (symbol == NULL) {
      fprintf(stderr, "%s has no %s (an older C ABI?)\n", path, kSymbols[i].name);
      dlclose(api->handle);
      api->handle = NULL;
      return 0;
    }
    /* POSIX guarantees a function's address fits an object pointer; memcpy says so
     * without the cast that ISO C leaves undefined. */
    memcpy((char *)api + kSymbols[i].offset, &symbol, sizeof symbol);
  }
  return 1;
}

/* One side of the comparison: a library, its model and its batch. */
typedef struct Side {
  Api api;
  loom_model *model;
  loom_batch *batch;
  int32_t vocab;
  double *prefill; /* tokens/s per round */
  double *decode;
  int32_t *greedy; /* the last round's greedy tokens, [batch][steps] */
} Side;

static int report(const Side *side, const char *what, loom_status status, loom_error *err) {
  fprintf(stderr, "%s: %s failed (%s): %s\n", side->api.path, what, side->api.status_str(status),
          err != NULL ? side->api.error_message(err) : "");
  side->api.error_free(err);
  return 0;
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct Options {
  const char *model;
  int batch, prompt, steps, rounds, layouts, threads, repack, kv_dtype;
} Options;

static int setup(Side *side, const Options *o) {
  loom_load_params lp;
  loom_model_info info;
  loom_batch_params bp;
  loom_error *err = NULL;
  loom_status st;
  side->api.load_params_init_sized(&lp, sizeof lp);
  lp.repack = o->repack;
  lp.log_level = LOOM_LOG_WARN;
  st = side->api.model_load(o->model, &lp, &side->model, &err);
  if (st != LOOM_OK) return report(side, "loom_model_load", st, err);
  side->api.model_info_init_sized(&info, sizeof info);
  st = side->api.model_get_info(side->model, &info);
  if (st != LOOM_OK) return report(side, "loom_model_get_info", st, NULL);
  side->vocab = info.vocab_size;
  side->api.batch_params_init_sized(&bp, sizeof bp);
  bp.max_sequences = o->batch;
  bp.context_length = o->prompt + o->steps + 1;
  bp.kv_dtype = o->kv_dtype;
  bp.n_threads = o->threads;
  st = side->api.batch_create(side->model, &bp, &side->batch, &err);
  if (st != LOOM_OK) return report(side, "loom_batch_create", st, err);
  return 1;
}

static void teardown(Side *side) {
  if (side->batch != NULL) side->api.batch_free(side->batch);
  if (side->model != NULL) side->api.model_free(side->model);
  side->batch = NULL;
  side->model = NULL;
}

/* One round of one side: prefill the prompts, decode `steps` greedy tokens, remove. */
static int run_round(Side *side, const Options *o, const int32_t *prompts, int round) {
  loom_seq_id *ids = calloc((size_t)o->batch, sizeof *ids);
  loom_batch_pass pass;
  loom_error *err = NULL;
  loom_status st;
  int s, step, added = 0, ready = 0, ok = 0;
  double t0;
  if (ids == NULL) return 0;
  side->api.batch_pass_init_sized(&pass, sizeof pass);
  for (s = 0; s < o->batch; ++s) {
    st = side->api.batch_add(side->batch, &ids[s], &err);
    if (st != LOOM_OK) goto failed_add;
    ++added;
    st = side->api.batch_feed(side->batch, ids[s], prompts + (size_t)s * (size_t)o->prompt, (size_t)o->prompt, 0,
                              &err);
    if (st != LOOM_OK) goto failed_feed;
  }
  t0 = now_seconds();
  while (ready < o->batch) {
    st = side->api.batch_decode(side->batch, &pass, &err);
    if (st != LOOM_OK) goto failed_decode;
    if (pass.tokens == 0) {
      fprintf(stderr, "%s: a pass with nothing to do before every prompt was done\n", side->api.path);
      goto done;
    }
    ready += pass.n_ready;
  }
  side->prefill[round] = (double)o->batch * o->prompt / (now_seconds() - t0);
  t0 = now_seconds();
  for (step = 0; step < o->steps; ++step) {
    for (s = 0; s < o->batch; ++s) {
      size_t n = 0, i, best = 0;
      const float *logits = side->api.batch_logits(side->batch, ids[s], &n);
      int32_t token;
      if (logits == NULL || n == 0) {
        fprintf(stderr, "%s: no logits for sequence %d\n", side->api.path, s);
        goto done;
      }
      for (i = 1; i < n; ++i) {
        if (logits[i] > logits[best]) best = i;
      }
      token = (int32_t)best;
      side->greedy[s * o->steps + step] = token;
      st = side->api.batch_feed(side->batch, ids[s], &token, 1, 0, &err);
      if (st != LOOM_OK) goto failed_feed;
    }
    st = side->api.batch_decode(side->batch, &pass, &err);
    if (st != LOOM_OK) goto failed_decode;
  }
  side->decode[round] = (double)o->batch * o->steps / (now_seconds() - t0);
  ok = 1;
  goto done;
failed_add:
  report(side, "loom_batch_add", st, err);
  goto done;
failed_feed:
  report(side, "loom_batch_feed", st, err);
  goto done;
failed_decode:
  report(side, "loom_batch_decode", st, err);
done:
  for (s = 0; s < added; ++s) side->api.batch_remove(side->batch, ids[s], NULL);
  free(ids);
  return ok;
}

static int compare_doubles(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of v[0..n) (the mean of the middle two for even n); v is reordered. */
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, compare_doubles);
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Everything one layout (a group of rounds) needs, shared with main. */
typedef struct Bench {
  Side *sides;
  const Options *o;
  int32_t *prompts;
  double *ratio_prefill, *ratio_decode; /* per round */
  double *layout_prefill, *layout_decode;
  int layout;
  int differ_round; /* the first round whose greedy tokens differ, or -1 */
  int ok;
} Bench;

/* One group of rounds, on a thread of its own. Where each side's memory lands moves its
 * speed by several percent: its model and batch (in an a/a run, one library against a
 * copy of itself, one group read b/a 1.08 for prefill and the next 0.92), and the
 * thread_local buffers each library gives the calling thread on its first pass (with one
 * thread for every round, the side that ran first read 2-4% faster prefill in every a/a
 * run, whichever library it was). So each group allocates both afresh, on a new thread,
 * a's first in even groups and b's first in odd ones; each group's b/a carries its
 * layout's luck and the geometric mean over groups averages it out. */
static void *run_layout(void *arg) {
  Bench *bench = arg;
  Side *sides = bench->sides;
  const Options *o = bench->o;
  const int layout = bench->layout, a_first = layout % 2 == 0;
  const int begin = o->rounds * layout / o->layouts, end = o->rounds * (layout + 1) / o->layouts;
  const int n = end - begin;
  double *copy = NULL;
  int i, round;
  for (i = 0; i < 2; ++i) {
    if (!setup(&sides[a_first ? i : 1 - i], o)) goto done;
  }
  if (sides[0].vocab != sides[1].vocab) {
    fprintf(stderr, "the two builds see different vocabularies (%d, %d)\n", sides[0].vocab, sides[1].vocab);
    goto done;
  }
  if (layout == 0) { /* the same pseudo-random prompt ids for both sides and every round */
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    for (i = 0; i < o->batch * o->prompt; ++i) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      bench->prompts[i] = (int32_t)((seed >> 33) % (uint64_t)sides[0].vocab);
    }
  }
  /* One unmeasured round each first, as llama-bench warms up: the first passes pay for
   * the pools' threads, the thread's buffers, page faults and cold caches. */
  for (i = 0; i < 2; ++i) {
    if (!run_round(&sides[a_first ? i : 1 - i], o, bench->prompts, begin)) goto done;
  }
  for (round = begin; round < end; ++round) {
    /* a then b in every round, so that each side's run follows the other's. */
    if (!run_round(&sides[0], o, bench->prompts, round) || !run_round(&sides[1], o, bench->prompts, round)) {
      goto done;
    }
    if (bench->differ_round < 0 &&
        memcmp(sides[0].greedy, sides[1].greedy, (size_t)o->batch * (size_t)o->steps * sizeof(int32_t)) != 0) {
      bench->differ_round = round;
    }
    bench->ratio_prefill[round] = sides[1].prefill[round] / sides[0].prefill[round];
    bench->ratio_decode[round] = sides[1].decode[round] / sides[0].decode[round];
    printf("%5d  %6d  %s  %9.1f  %9.1f  %9.1f  %9.1f\n", round, layout, a_first ? "a, b" : "b, a",
           sides[0].prefill[round], sides[1].prefill[round], sides[0].decode[round], sides[1].decode[round]);
  }
  /* This layout's ratios of medians (median() reorders, so on copies). */
  copy = malloc(4 * (size_t)n * sizeof(double));
  if (copy == NULL) goto done;
  memcpy(copy, sides[0].prefill + begin, (size_t)n * sizeof(double));
  memcpy(copy + n, sides[1].prefill + begin, (size_t)n * sizeof(double));
  memcpy(copy + 2 * n, sides[0].decode + begin, (size_t)n * sizeof(double));
  memcpy(copy + 3 * n, sides[1].decode + begin, (size_t)n * sizeof(double));
  bench->layout_prefill[layout] = median(copy + n, n) / median(copy, n);
  bench->layout_decode[layout] = median(copy + 3 * n, n) / median(copy + 2 * n, n);
  free(copy);
  bench->ok = 1;
done:
  for (i = 0; i < 2; ++i) teardown(&sides[i]);
  return NULL;
}

static int parse_int(const char *flag, const char *value, int min, int *out) {
  char *end = NULL;
  const long v = strtol(value, &end, 10);
  if (end == value || *end != '\0' || v < min || v > 1000000) {
    fprintf(stderr, "%s wants an integer of at least %d, not '%s'\n", flag, min, value);
    return 0;
  }
  *out = (int)v;
  return 1;
}

/* The integer flags: where each goes in Options and its least value. */
typedef struct IntFlag {
  const char *name;
  int min;
  size_t offset;
} IntFlag;
static const IntFlag kIntFlags[] = {
    {"--batch", 1, offsetof(Options, batch)},   {"--prompt", 1, offsetof(Options, prompt)},
    {"--steps", 1, offsetof(Options, steps)},   {"--rounds", 1, offsetof(Options, rounds)},
    {"--layouts", 1, offsetof(Options, layouts)}, {"--threads", 0, offsetof(Options, threads)},
};

static const IntFlag *int_flag(const char *name) {
  size_t i;
  for (i = 0; i < sizeof kIntFlags / sizeof kIntFlags[0]; ++i) {
    if (strcmp(kIntFlags[i].name, name) == 0) return &kIntFlags[i];
  }
  return NULL;
}

static int usage(void) {
  fprintf(stderr,
          "usage: loom_ab_builds --a LIB [--b LIB] --model FILE [--batch 8] [--prompt 128] [--steps 16]\n"
          "                      [--rounds 12] [--layouts 4] [--threads 0] [--repack off|auto] [--kv f32|f16]\n");
  return 2;
}

int main(int argc, char **argv) {
  Options o = {NULL, 8, 128, 16, 12, 4, 0, LOOM_REPACK_OFF, LOOM_DTYPE_F32};
  const char *paths[2] = {NULL, LOOM_SHARED_LIBRARY};
  Side sides[2];
  int32_t *prompts = NULL;
  double *ratio_prefill = NULL, *ratio_decode = NULL;
  double *layout_prefill = NULL, *layout_decode = NULL;
  Bench bench;
  const IntFlag *int_option = NULL;
  int i, layout, rc = 1, opened = 0;
  memset(sides, 0, sizeof sides);
  for (i = 1; i < argc; i += 2) {
    const char *flag = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (value == NULL) return usage();
    if (strcmp(flag, "--a") == 0) {
      paths[0] = value;
    } else if (strcmp(flag, "--b") == 0) {
      paths[1] = value;
    } else if (strcmp(flag, "--model") == 0) {
      o.model = value;
    } else if ((int_option = int_flag(flag)) != NULL) {
      if (!parse_int(flag, value, int_option->min, (int *)((char *)&o + int_option->offset))) return 2;
    } else if (strcmp(flag, "--repack") == 0 && (strcmp(value, "off") == 0 || strcmp(value, "auto") == 0)) {
      o.repack = strcmp(value, "auto") == 0 ? LOOM_REPACK_AUTO : LOOM_REPACK_OFF;
    } else if (strcmp(flag, "--kv") == 0 && (strcmp(value, "f32") == 0 || strcmp(value, "f16") == 0)) {
      o.kv_dtype = strcmp(value, "f16") == 0 ? LOOM_DTYPE_F16 : LOOM_DTYPE_F32;
    } else {
      fprintf(stderr, "unknown flag or value: %s %s\n", flag, value);
      return usage();
    }
  }
  if (paths[0] == NULL || paths[1] == NULL || paths[1][0] == '\0' || o.model == NULL) return usage();
  if (o.layouts > o.rounds) {
    fprintf(stderr, "--layouts %d needs at least as many --rounds (%d)\n", o.layouts, o.rounds);
    return 2;
  }

  for (i = 0; i < 2; ++i) {
    if (!open_api(paths[i], &sides[i].api)) goto cleanup;
    ++opened;
    sides[i].prefill = calloc((size_t)o.rounds, sizeof(double));
    sides[i].decode = calloc((size_t)o.rounds, sizeof(double));
    sides[i].greedy = calloc((size_t)o.batch * (size_t)o.steps, sizeof(int32_t));
    if (sides[i].prefill == NULL || sides[i].decode == NULL || sides[i].greedy == NULL) goto cleanup;
  }
  prompts = malloc((size_t)o.batch * (size_t)o.prompt * sizeof *prompts);
  ratio_prefill = malloc((size_t)o.rounds * sizeof(double));
  ratio_decode = malloc((size_t)o.rounds * sizeof(double));
  layout_prefill = malloc((size_t)o.layouts * sizeof(double));
  layout_decode = malloc((size_t)o.layouts * sizeof(double));
  if (prompts == NULL || ratio_prefill == NULL || ratio_decode == NULL || layout_prefill == NULL ||
      layout_decode == NULL) {
    goto cleanup;
  }
  bench.sides = sides;
  bench.o = &o;
  bench.prompts = prompts;
  bench.ratio_prefill = ratio_prefill;
  bench.ratio_decode = ratio_decode;
  bench.layout_prefill = layout_prefill;
  bench.layout_decode = layout_decode;
  bench.differ_round = -1;

  printf("a: %s (loom %s)\nb: %s (loom %s)\n", paths[0], sides[0].api.version_string(), paths[1],
         sides[1].api.version_string());
  printf("model: %s, batch %d, prompt %d, steps %d, rounds %d in %d layouts, threads %d, repack %s, kv %s\n",
         o.model, o.batch, o.prompt, o.steps, o.rounds, o.layouts, o.threads,
         o.repack == LOOM_REPACK_AUTO ? "auto" : "off", o.kv_dtype == LOOM_DTYPE_F16 ? "f16" : "f32");
  printf("round  layout  first  a prefill  b prefill   a decode   b decode  (tokens/s)\n");
  /* The rounds in `layouts` groups, each on a thread of its own with both models and
   * batches allocated afresh, a's first in even groups and b's first in odd ones (see
   * run_layout). */
  for (layout = 0; layout < o.layouts; ++layout) {
    pthread_t thread;
    bench.layout = layout;
    bench.ok = 0;
    if (pthread_create(&thread, NULL, run_layout, &bench) != 0) {
      fprintf(stderr, "cannot start a thread for layout %d\n", layout);
      goto cleanup;
    }
    pthread_join(thread, NULL);
    if (!bench.ok) goto cleanup;
  }
  {
    const double pa = median(sides[0].prefill, o.rounds), pb = median(sides[1].prefill, o.rounds);
    const double da = median(sides[0].decode, o.rounds), db = median(sides[1].decode, o.rounds);
    double log_prefill = 0.0, log_decode = 0.0;
    printf("median prefill: a %.1f, b %.1f tokens/s\n", pa, pb);
    printf("median decode:  a %.1f, b %.1f tokens/s\n", da, db);
    printf("b/a per layout, prefill:");
    for (i = 0; i < o.layouts; ++i) {
      printf(" %.3f", layout_prefill[i]);
      log_prefill += log(layout_prefill[i]);
    }
    printf("; decode:");
    for (i = 0; i < o.layouts; ++i) {
      printf(" %.3f", layout_decode[i]);
      log_decode += log(layout_decode[i]);
    }
    printf("\nb/a (geometric mean of the layouts): prefill %.3f, decode %.3f\n", exp(log_prefill / o.layouts),
           exp(log_decode / o.layouts));
    printf("median of the rounds' own ratios: prefill %.3f, decode %.3f\n", median(ratio_prefill, o.rounds),
           median(ratio_decode, o.rounds));
  }
  if (bench.differ_round < 0) {
    printf("greedy tokens: the same in every round\n");
  } else {
    printf("greedy tokens: differ from round %d (the builds' products do not keep the same bits)\n",
           bench.differ_round);
  }
  rc = 0;

cleanup:
  for (i = 0; i < opened; ++i) {
    teardown(&sides[i]);
    free(sides[i].prefill);
    free(sides[i].decode);
    free(sides[i].greedy);
    dlclose(sides[i].api.handle);
  }
  free(prompts);
  free(ratio_prefill);
  free(ratio_decode);
  free(layout_prefill);
  free(layout_decode);
  return rc;
}
