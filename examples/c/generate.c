/* A C99 host of libloom.so: load a model, stream a generation, print tokens/s.
 *   generate MODEL_PATH [PROMPT] [MAX_TOKENS]
 * Every call's status is checked; errors print the library's full message. */
#include <loom.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int print_piece(void *user, const char *text, size_t len, int32_t token) {
  (void)user;
  (void)token;
  fwrite(text, 1, len, stdout);
  fflush(stdout);
  return 1; /* keep going */
}

static int fail(const char *what, loom_status status, loom_error *err) {
  fprintf(stderr, "%s failed (%s): %s\n", what, loom_status_str(status), err ? loom_error_message(err) : "");
  loom_error_free(err);
  return 1;
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : NULL;
  const char *prompt = argc > 2 ? argv[2] : "Once upon a time";
  const int max_tokens = argc > 3 ? atoi(argv[3]) : 32;
  loom_model *model = NULL;
  loom_session *session = NULL;
  loom_sampler *sampler = NULL;
  loom_error *err = NULL;
  loom_status status;
  loom_load_params load;
  loom_session_params sp;
  loom_sampler_params smp;
  loom_generate_params gp;
  loom_generate_result result;

  if (path == NULL) {
    fprintf(stderr, "usage: %s MODEL_PATH [PROMPT] [MAX_TOKENS]\n", argv[0]);
    return 2;
  }
  if (loom_version_number() / 10000 != LOOM_VERSION_NUMBER / 10000) {
    fprintf(stderr, "libloom %s does not match this header (%d)\n", loom_version_string(), LOOM_VERSION_NUMBER);
    return 1;
  }
  loom_load_params_init(&load);
  load.log_level = LOOM_LOG_WARN;
  status = loom_model_load(path, &load, &model, &err);
  if (status != LOOM_OK) return fail("loom_model_load", status, err);

  loom_session_params_init(&sp);
  status = loom_session_create(model, &sp, &session, &err);
  if (status != LOOM_OK) return fail("loom_session_create", status, err);

  loom_sampler_params_init(&smp);
  smp.seed = 7;
  status = loom_sampler_create(&smp, &sampler, &err);
  if (status != LOOM_OK) return fail("loom_sampler_create", status, err);

  loom_generate_params_init(&gp);
  gp.max_tokens = max_tokens;
  gp.on_text = print_piece;
  loom_generate_result_init(&result);
  fputs(prompt, stdout);
  status = loom_generate(session, sampler, prompt, strlen(prompt), &gp, &result, &err);
  if (status != LOOM_OK) return fail("loom_generate", status, err);
  printf("\n[c] prompt %d tokens at %.1f tok/s, generated %d tokens at %.1f tok/s\n", result.prompt_tokens,
         result.prompt_seconds > 0 ? result.prompt_tokens / result.prompt_seconds : 0.0, result.generated_tokens,
         result.generate_seconds > 0 ? result.generated_tokens / result.generate_seconds : 0.0);

  loom_sampler_free(sampler);
  loom_session_free(session);
  loom_model_free(model);
  return result.generated_tokens > 0 ? 0 : 1;
}
