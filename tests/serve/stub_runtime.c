/* Test-only stand-in exporting the C functions edge-llm-serve binds (its LITERT_LM_PROTOTYPES and
 * GENIE_PROTOTYPES), with timings from the environment: STUB_LOAD_MS, STUB_TTFT_MS, STUB_DECODE_MS,
 * STUB_TOKENS. A prompt containing CRASH aborts the process (a runtime crash); FAIL reports an error. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <stdio.h>
#include <unistd.h>

static int env_int(const char *name, int dflt) { const char *v = getenv(name); return v ? atoi(v) : dflt; }
static void sleep_ms(int ms) { struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L}; nanosleep(&t, NULL); }
static const char *WORDS[] = {"alpha ", "beta ", "gamma ", "delta ", "epsilon ", "zeta ", "eta ", "theta "};
static volatile int g_started = 0;   /* generations started (tests read it through stub_started) */
int stub_started(void) { return g_started; }

typedef struct { int type; int32_t top_k; float top_p; float temperature; int32_t seed; } Sampler;
typedef struct { int type; const void *data; size_t size; } Input;
typedef void (*Cb)(void *, const char *, bool, const char *);
typedef struct { int max_tokens; } SessionConfig;
typedef struct { volatile int cancel; int max_tokens; char *prompt; Cb cb; void *data; int ntok; double ttft;
                 pthread_t th; int running; } Session;
typedef struct { double ttft; int prefill, decode; double rate; } Bench;

void litert_lm_set_min_log_level(int l) { (void)l; }
void *litert_lm_engine_settings_create(const char *m, const char *b, const char *v, const char *a) {
  (void)b; (void)v; (void)a; return access(m, R_OK) == 0 ? malloc(1) : NULL; }
void litert_lm_engine_settings_delete(void *s) { free(s); }
void litert_lm_engine_settings_set_max_num_tokens(void *s, int n) { (void)s; (void)n; }
void litert_lm_engine_settings_set_cache_dir(void *s, const char *d) { (void)s; (void)d; }
void litert_lm_engine_settings_set_litert_dispatch_lib_dir(void *s, const char *d) { (void)s; (void)d; }
void litert_lm_engine_settings_enable_benchmark(void *s) { (void)s; }
void *litert_lm_engine_create(void *s) { (void)s; sleep_ms(env_int("STUB_LOAD_MS", 0)); return malloc(1); }
void litert_lm_engine_delete(void *e) { free(e); }
void *litert_lm_session_config_create(void) { SessionConfig *c = calloc(1, sizeof *c); c->max_tokens = 1 << 20; return c; }
void litert_lm_session_config_set_max_output_tokens(void *c, int n) { ((SessionConfig *)c)->max_tokens = n; }
void litert_lm_session_config_set_apply_prompt_template(void *c, bool b) { (void)c; (void)b; }
void litert_lm_session_config_set_sampler_params(void *c, const Sampler *p) { (void)c; (void)p; }
void litert_lm_session_config_delete(void *c) { free(c); }
void *litert_lm_engine_create_session(void *e, void *c) {
  (void)e; Session *s = calloc(1, sizeof *s); s->max_tokens = c ? ((SessionConfig *)c)->max_tokens : 1 << 20; return s; }
static void join(Session *s) { if (s->running) { pthread_join(s->th, NULL); s->running = 0; } }
void litert_lm_session_delete(void *p) { Session *s = p; join(s); free(s->prompt); free(s); }
void litert_lm_session_cancel_process(void *p) { ((Session *)p)->cancel = 1; }

static void *run(void *p) {
  Session *s = p;
  g_started++;
  if (strstr(s->prompt, "CRASH")) abort();
  sleep_ms(env_int("STUB_TTFT_MS", 5));
  if (strstr(s->prompt, "FAIL")) { s->cb(s->data, NULL, true, "stub: decode failed"); return NULL; }
  int n = env_int("STUB_TOKENS", 8);
  if (n > s->max_tokens) n = s->max_tokens;
  for (int i = 0; i < n && !s->cancel; i++) {
    if (i) sleep_ms(env_int("STUB_DECODE_MS", 2));
    s->cb(s->data, WORDS[i % 8], false, NULL);
    s->ntok++;
  }
  s->cb(s->data, NULL, true, NULL);
  return NULL;
}
static int start(Session *s, const char *text, size_t len, Cb cb, void *data) {
  s->prompt = strndup(text, len); s->cb = cb; s->data = data; s->running = 1;
  return pthread_create(&s->th, NULL, run, s);
}
int litert_lm_session_generate_content_stream(void *p, const Input *in, size_t n, Cb cb, void *data) {
  (void)n; return start(p, in->data, in->size, cb, data); }
static void *bench(Session *s) { join(s); Bench *b = calloc(1, sizeof *b); b->ttft = env_int("STUB_TTFT_MS", 5) / 1000.0;
  b->prefill = 7; b->decode = s->ntok; b->rate = 1000.0 / (env_int("STUB_DECODE_MS", 2) + 0.001); return b; }
void *litert_lm_session_get_benchmark_info(void *p) { return bench(p); }

typedef struct { SessionConfig sc; } ConvConfig;
void *litert_lm_conversation_config_create(void) { ConvConfig *c = calloc(1, sizeof *c); c->sc.max_tokens = 1 << 20; return c; }
void litert_lm_conversation_config_set_session_config(void *c, void *sc) { ((ConvConfig *)c)->sc = *(SessionConfig *)sc; }
void litert_lm_conversation_config_set_system_message(void *c, const char *j) { (void)c; (void)j; }
void litert_lm_conversation_config_set_messages(void *c, const char *j) { (void)c; (void)j; }
void litert_lm_conversation_config_delete(void *c) { free(c); }
void *litert_lm_conversation_create(void *e, void *c) { return litert_lm_engine_create_session(e, &((ConvConfig *)c)->sc); }
void litert_lm_conversation_delete(void *p) { litert_lm_session_delete(p); }
int litert_lm_conversation_send_message_stream(void *p, const char *msg, const char *x, void *o, Cb cb, void *data) {
  (void)x; (void)o; return start(p, msg, strlen(msg), cb, data); }
void litert_lm_conversation_cancel_process(void *p) { litert_lm_session_cancel_process(p); }
void *litert_lm_conversation_get_benchmark_info(void *p) { return bench(p); }
void litert_lm_benchmark_info_delete(void *b) { free(b); }
double litert_lm_benchmark_info_get_time_to_first_token(void *b) { return ((Bench *)b)->ttft; }
double litert_lm_benchmark_info_get_total_init_time_in_second(void *b) { (void)b; return 0; }
int litert_lm_benchmark_info_get_num_prefill_turns(void *b) { (void)b; return 1; }
int litert_lm_benchmark_info_get_num_decode_turns(void *b) { (void)b; return 1; }
int litert_lm_benchmark_info_get_prefill_token_count_at(void *b, int i) { (void)i; return ((Bench *)b)->prefill; }
int litert_lm_benchmark_info_get_decode_token_count_at(void *b, int i) { (void)i; return ((Bench *)b)->decode; }
double litert_lm_benchmark_info_get_prefill_tokens_per_sec_at(void *b, int i) { (void)b; (void)i; return 700; }
double litert_lm_benchmark_info_get_decode_tokens_per_sec_at(void *b, int i) { (void)i; return ((Bench *)b)->rate; }

/* Genie */
typedef void (*GCb)(const char *, int, const void *);
typedef struct { volatile int abort; uint32_t max_tokens; } Dialog;
int32_t GenieDialogConfig_createFromJson(const char *s, void **h) { if (!strstr(s, "dialog")) return -7; *h = malloc(1); return 0; }
int32_t GenieDialogConfig_free(void *h) { free(h); return 0; }
int32_t GenieDialog_create(void *c, void **h) { (void)c; sleep_ms(env_int("STUB_LOAD_MS", 0));
  Dialog *d = calloc(1, sizeof *d); d->max_tokens = 1 << 20; *h = d; return 0; }
int32_t GenieDialog_query(void *h, const char *q, int code, GCb cb, const void *data) {
  (void)code; Dialog *d = h; d->abort = 0; g_started++;
  if (strstr(q, "CRASH")) abort();
  sleep_ms(env_int("STUB_TTFT_MS", 5));
  if (strstr(q, "FAIL")) return -6;
  int n = env_int("STUB_TOKENS", 8);
  if ((uint32_t)n > d->max_tokens) n = (int)d->max_tokens;
  for (int i = 0; i < n; i++) {
    if (d->abort) { cb("", 4, data); return 1; }
    if (i) sleep_ms(env_int("STUB_DECODE_MS", 2));
    cb(WORDS[i % 8], i == 0 ? 1 : 2, data);
  }
  cb("", 3, data);
  return 0;
}
int32_t GenieDialog_signal(void *h, int action) { if (action == 1) ((Dialog *)h)->abort = 1; return 0; }
int32_t GenieDialog_setMaxNumTokens(void *h, uint32_t n) { ((Dialog *)h)->max_tokens = n; return 0; }
int32_t GenieDialog_reset(void *h) { (void)h; return 0; }
int32_t GenieDialog_free(void *h) { free(h); return 0; }
