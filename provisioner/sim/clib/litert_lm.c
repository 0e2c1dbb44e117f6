/* SIMULATED liblitert-lm.so for edge-llm virtual boards - not LiteRT-LM.
 *
 * Exports the subset of LiteRT-LM's C API (c/engine.h, google-ai-edge/LiteRT-LM; signatures as
 * at dc48681d; the pin cbf463d97fa3: github.com/zkh2016/LiteRT-LM) that edge-llm-serve binds, with the same
 * signatures. generate_content_stream / send_message_stream are non-blocking like the real
 * ones: a worker thread calls the stream callback per chunk and once with is_final; generations
 * of one engine take the NPU in turn. Speeds and faults come from provisioner.sim.npu, and so do the
 * words: on a machine with Google's real runtime they are its answer to what this library was given
 * (a conversation's system message, earlier messages, tools, constrained-decoding switch and message,
 * passed on as one JSON envelope; a session's prompt with or without the prompt template), see
 * provisioner/sim/real_litert.py.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "oracle.h"

__attribute__((used)) const char edge_llm_sim_stub_id[] = STANDIN_ID;

typedef void (*LiteRtLmStreamCallback)(void* callback_data, const char* chunk, bool is_final,
                                       const char* error_msg);
typedef struct {
  int type;
  int32_t top_k;
  float top_p;
  float temperature;
  int32_t seed;
} LiteRtLmSamplerParams;
typedef struct {
  int type;
  const void* data;
  size_t size;
} LiteRtLmInputData;

typedef struct {
  char* model_path;
  char* backend;
  char* dispatch_dir;
  int max_num_tokens;
} Settings;
typedef struct {
  sim_oracle oracle;
  int max_num_tokens;
} Engine;
typedef struct {
  int max_output_tokens;
  int raw; /* apply_prompt_template false (engine.h:136; the runtime's default is true) */
} SessionConfig;
typedef struct {
  double ttft_s, init_s;
  int prefill_tokens, decode_tokens;
  double prefill_rate, decode_rate;
} Bench;
typedef struct {
  Engine* engine;
  int max_output_tokens;
  int raw;
  char* system_json;   /* a conversation's system message, history and tools, JSON as the caller set them */
  char* messages_json;
  char* tools_json;
  bool constrained;    /* set_enable_constrained_decoding (engine.h:199) */
  volatile int cancel;
  int running;
  pthread_t worker;
  Bench bench;
  int have_bench;
  /* the generation in flight */
  char* prompt;
  const char* mode;
  LiteRtLmStreamCallback cb;
  void* cb_data;
} Session;
typedef struct {
  SessionConfig* session_config;
  char* system_json;
  char* messages_json;
  char* tools_json;
  bool constrained;
} ConversationConfig;

static char* dup_or_null(const char* s) { return s ? strdup(s) : NULL; }

void litert_lm_set_min_log_level(int level) { (void)level; }

void* litert_lm_engine_settings_create(const char* model_path, const char* backend,
                                       const char* vision, const char* audio) {
  (void)vision;
  (void)audio;
  if (model_path == NULL) return NULL;
  Settings* s = calloc(1, sizeof(Settings));
  s->model_path = strdup(model_path);
  s->backend = strdup(backend ? backend : "cpu");
  return s;
}
void litert_lm_engine_settings_delete(void* p) {
  Settings* s = p;
  if (!s) return;
  free(s->model_path);
  free(s->backend);
  free(s->dispatch_dir);
  free(s);
}
void litert_lm_engine_settings_set_max_num_tokens(void* p, int n) { ((Settings*)p)->max_num_tokens = n; }
void litert_lm_engine_settings_set_cache_dir(void* p, const char* dir) { (void)p; (void)dir; }
void litert_lm_engine_settings_set_litert_dispatch_lib_dir(void* p, const char* dir) {
  Settings* s = p;
  free(s->dispatch_dir);
  s->dispatch_dir = dup_or_null(dir);
}
void litert_lm_engine_settings_enable_benchmark(void* p) { (void)p; }

void* litert_lm_engine_create(void* p) {
  Settings* s = p;
  if (s == NULL) return NULL;
  if (strcmp(s->backend, "npu") != 0) {
    fprintf(stderr, "INVALID_ARGUMENT: Main backend constraint mismatch. Model requires one of [npu] "
                    "but Main backend is %s\n", s->backend);
    return NULL;
  }
  if (s->dispatch_dir) setenv("EDGE_LLM_SIM_DISPATCH_DIR", s->dispatch_dir, 1);
  Engine* e = calloc(1, sizeof(Engine));
  e->max_num_tokens = s->max_num_tokens;
  if (sim_oracle_open(&e->oracle, "litert", s->model_path) != 0) {
    free(e);
    return NULL;
  }
  return e;
}
void litert_lm_engine_delete(void* p) {
  Engine* e = p;
  if (!e) return;
  sim_oracle_close(&e->oracle);
  free(e);
}

void* litert_lm_session_config_create(void) { return calloc(1, sizeof(SessionConfig)); }
void litert_lm_session_config_set_max_output_tokens(void* p, int n) { ((SessionConfig*)p)->max_output_tokens = n; }
void litert_lm_session_config_set_apply_prompt_template(void* p, bool v) { ((SessionConfig*)p)->raw = !v; }
void litert_lm_session_config_set_sampler_params(void* p, const LiteRtLmSamplerParams* sp) { (void)p; (void)sp; }
void litert_lm_session_config_delete(void* p) { free(p); }

void* litert_lm_engine_create_session(void* engine, void* config) {
  if (engine == NULL) return NULL;
  Session* s = calloc(1, sizeof(Session));
  s->engine = engine;
  s->max_output_tokens = config ? ((SessionConfig*)config)->max_output_tokens : 0;
  s->raw = config ? ((SessionConfig*)config)->raw : 0;
  return s;
}

static void join_worker(Session* s) {
  if (s->running) {
    if (pthread_equal(pthread_self(), s->worker))
      pthread_detach(s->worker); /* called from its own stream callback */
    else
      pthread_join(s->worker, NULL);
    s->running = 0;
  }
}

void litert_lm_session_cancel_process(void* p) {
  if (p) ((Session*)p)->cancel = 1;
}

void litert_lm_session_delete(void* p) {
  Session* s = p;
  if (!s) return;
  s->cancel = 1;
  join_worker(s);
  free(s->system_json);
  free(s->messages_json);
  free(s->tools_json);
  free(s);
}

static void* generate(void* arg) {
  Session* s = arg;
  Engine* e = s->engine;
  pthread_mutex_lock(&e->oracle.npu_mu);
  sim_reply r;
  int max_tokens = s->max_output_tokens ? s->max_output_tokens : e->max_num_tokens;
  if (s->cancel) {
    pthread_mutex_unlock(&e->oracle.npu_mu);
    s->cb(s->cb_data, NULL, true, "CANCELLED: generation cancelled");
    free(s->prompt);
    s->prompt = NULL;
    return NULL;
  }
  if (sim_oracle_query(&e->oracle, s->mode, max_tokens, s->prompt, strlen(s->prompt), &r) != 0) {
    pthread_mutex_unlock(&e->oracle.npu_mu);
    s->cb(s->cb_data, NULL, true, "INTERNAL: NPU executor failed");
    free(s->prompt);
    s->prompt = NULL;
    return NULL;
  }
  int cancelled = 0;
  for (int i = 0; i < r.n && !cancelled; i++) {
    cancelled = sim_sleep(r.sleep_s[i], &s->cancel);
    if (!cancelled) s->cb(s->cb_data, r.chunk[i], false, NULL);
  }
  s->bench.ttft_s = r.ttft_s;
  s->bench.init_s = e->oracle.init_s;
  s->bench.prefill_tokens = r.prompt_tokens;
  s->bench.decode_tokens = r.decode_tokens;
  s->bench.prefill_rate = r.prefill_s > 0 ? r.prompt_tokens / r.prefill_s : 0;
  s->bench.decode_rate = r.decode_s > 0 ? r.decode_tokens / r.decode_s : 0;
  s->have_bench = 1;
  sim_reply_free(&r);
  pthread_mutex_unlock(&e->oracle.npu_mu);
  free(s->prompt);
  s->prompt = NULL;
  if (cancelled)
    s->cb(s->cb_data, NULL, true, "CANCELLED: generation cancelled");
  else
    s->cb(s->cb_data, "", true, NULL);
  return NULL;
}

static int start(Session* s, char* prompt, const char* mode, LiteRtLmStreamCallback cb, void* data) {
  join_worker(s);
  s->cancel = 0;
  s->prompt = prompt;
  s->mode = mode;
  s->cb = cb;
  s->cb_data = data;
  if (pthread_create(&s->worker, NULL, generate, s) != 0) {
    free(prompt);
    s->prompt = NULL;
    return -1;
  }
  s->running = 1;
  return 0;
}

int litert_lm_session_generate_content_stream(void* p, const LiteRtLmInputData* inputs, size_t n,
                                              LiteRtLmStreamCallback cb, void* data) {
  Session* s = p;
  if (s == NULL || cb == NULL || (n && inputs == NULL)) return -1;
  size_t total = 0;
  for (size_t i = 0; i < n; i++)
    if (inputs[i].type == 0) total += inputs[i].size;
  char* prompt = malloc(total + 1);
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    if (inputs[i].type != 0 || inputs[i].data == NULL) continue;
    memcpy(prompt + at, inputs[i].data, inputs[i].size);
    at += inputs[i].size;
  }
  prompt[at] = '\0';
  return start(s, prompt, s->raw ? "raw" : "text", cb, data);
}

static Bench* bench_copy(Session* s) {
  if (!s || !s->have_bench) return NULL;
  Bench* b = malloc(sizeof(Bench));
  *b = s->bench;
  return b;
}
void* litert_lm_session_get_benchmark_info(void* p) {
  return bench_copy(p); /* filled before the final callback */
}

/* Conversations: one session each; messages are JSON, so are the chunks. */
void* litert_lm_conversation_config_create(void) { return calloc(1, sizeof(ConversationConfig)); }
void litert_lm_conversation_config_set_session_config(void* p, void* sc) {
  ((ConversationConfig*)p)->session_config = sc;
}
void litert_lm_conversation_config_set_system_message(void* p, const char* json) {
  ConversationConfig* c = p;
  free(c->system_json);
  c->system_json = dup_or_null(json);
}
void litert_lm_conversation_config_set_messages(void* p, const char* json) {
  ConversationConfig* c = p;
  free(c->messages_json);
  c->messages_json = dup_or_null(json);
}
/* engine.h:177: a JSON array of tools, rendered and parsed by the real runtime */
void litert_lm_conversation_config_set_tools(void* p, const char* json) {
  ConversationConfig* c = p;
  free(c->tools_json);
  c->tools_json = dup_or_null(json);
}
void litert_lm_conversation_config_set_enable_constrained_decoding(void* p, bool v) {
  ((ConversationConfig*)p)->constrained = v;
}
void litert_lm_conversation_config_delete(void* p) {
  ConversationConfig* c = p;
  if (!c) return;
  free(c->system_json);
  free(c->messages_json);
  free(c->tools_json);
  free(c);
}
void* litert_lm_conversation_create(void* engine, void* config) {
  ConversationConfig* c = config;
  Session* s = litert_lm_engine_create_session(engine, c ? c->session_config : NULL);
  if (s && c) {
    s->system_json = dup_or_null(c->system_json);
    s->messages_json = dup_or_null(c->messages_json);
    s->tools_json = dup_or_null(c->tools_json);
    s->constrained = c->constrained;
  }
  return s;
}
void litert_lm_conversation_delete(void* p) { litert_lm_session_delete(p); }
int litert_lm_conversation_send_message_stream(void* p, const char* message_json, const char* extra,
                                               void* optional_args, LiteRtLmStreamCallback cb,
                                               void* data) {
  (void)extra;
  (void)optional_args;
  if (p == NULL || message_json == NULL || cb == NULL) return -1;
  Session* s = p;
  /* each part is JSON already (as the caller gave it), so the envelope is their concatenation */
  const char* sys = s->system_json ? s->system_json : "null";
  const char* msgs = s->messages_json ? s->messages_json : "null";
  const char* tools = s->tools_json ? s->tools_json : "null";
  size_t n = strlen(sys) + strlen(msgs) + strlen(tools) + strlen(message_json) + 96;
  char* env = malloc(n);
  snprintf(env, n, "{\"system\":%s,\"messages\":%s,\"tools\":%s,\"constrained\":%s,\"message\":%s}",
           sys, msgs, tools, s->constrained ? "true" : "false", message_json);
  return start(s, env, "conv", cb, data);
}
void litert_lm_conversation_cancel_process(void* p) { litert_lm_session_cancel_process(p); }
void* litert_lm_conversation_get_benchmark_info(void* p) { return litert_lm_session_get_benchmark_info(p); }

void litert_lm_benchmark_info_delete(void* p) { free(p); }
double litert_lm_benchmark_info_get_time_to_first_token(void* p) { return ((Bench*)p)->ttft_s; }
double litert_lm_benchmark_info_get_total_init_time_in_second(void* p) { return ((Bench*)p)->init_s; }
int litert_lm_benchmark_info_get_num_prefill_turns(void* p) { return p ? 1 : 0; }
int litert_lm_benchmark_info_get_num_decode_turns(void* p) { return p ? 1 : 0; }
int litert_lm_benchmark_info_get_prefill_token_count_at(void* p, int i) { return i == 0 ? ((Bench*)p)->prefill_tokens : 0; }
int litert_lm_benchmark_info_get_decode_token_count_at(void* p, int i) { return i == 0 ? ((Bench*)p)->decode_tokens : 0; }
double litert_lm_benchmark_info_get_prefill_tokens_per_sec_at(void* p, int i) { return i == 0 ? ((Bench*)p)->prefill_rate : 0; }
double litert_lm_benchmark_info_get_decode_tokens_per_sec_at(void* p, int i) { return i == 0 ? ((Bench*)p)->decode_rate : 0; }
