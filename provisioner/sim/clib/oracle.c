/* SIMULATED NPU library support for edge-llm virtual boards (see oracle.h). */
#define _GNU_SOURCE
#include "oracle.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char** environ;

#define SIM_DIR "/run/edge-llm-sim"

static const char kBoot[] =
    "import sys; sys.path.insert(0, '" SIM_DIR "/src'); "
    "from provisioner.sim.npu import serve; sys.exit(serve(sys.argv[1]))";
/* board-less answers=1: the test's python, its own sys.path (the checkout the tests run from) */
static const char kBootBoardless[] =
    "import sys; from provisioner.sim.npu import serve_boardless; sys.exit(serve_boardless(sys.argv[1]))";

static char* read_line(FILE* f) {
  char* line = NULL;
  size_t cap = 0;
  ssize_t n = getline(&line, &cap, f);
  if (n < 0) {
    free(line);
    return NULL;
  }
  if (n > 0 && line[n - 1] == '\n') line[n - 1] = '\0';
  return line;
}

/* EDGE_LLM_SIM_BOARDLESS (see oracle.h): 1 when set, with its timings in *bl. */
static int boardless(sim_boardless* bl) {
  const char* spec = getenv("EDGE_LLM_SIM_BOARDLESS");
  if (spec == NULL) return 0;
  *bl = (sim_boardless){1, 0.0, 0.005, 0.002, 8, 0};
  char* copy = strdup(spec);
  char* save = NULL;
  for (char* kv = strtok_r(copy, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
    char* eq = strchr(kv, '=');
    if (eq == NULL) continue;
    *eq = '\0';
    double v = atof(eq + 1);
    if (strcmp(kv, "load_ms") == 0) bl->load_s = v / 1000.0;
    else if (strcmp(kv, "ttft_ms") == 0) bl->ttft_s = v / 1000.0;
    else if (strcmp(kv, "decode_ms") == 0) bl->decode_s = v / 1000.0;
    else if (strcmp(kv, "tokens") == 0) bl->tokens = (int)v;
    else if (strcmp(kv, "answers") == 0) bl->answers = (int)v;
    else fprintf(stderr, "EDGE_LLM_SIM_BOARDLESS: unknown key %s (ignored)\n", kv);
  }
  free(copy);
  return 1;
}

static const char* const kBoardlessWords[] = {"alpha ", "beta ", "gamma ", "delta ",
                                              "epsilon ", "zeta ", "eta ", "theta "};

/* Board-less faults: CRASH in the prompt aborts the process, FAIL fails the query (-1). */
static int boardless_fault(const char* prompt, size_t len) {
  char* text = strndup(prompt, len);
  int crash = strstr(text, "CRASH") != NULL, fail = strstr(text, "FAIL") != NULL;
  free(text);
  if (crash) abort();
  if (fail) {
    fprintf(stderr, "boardless stand-in: query failed (FAIL in the prompt)\n");
    return -1;
  }
  return 0;
}

/* The board-less answer: the fixed words, min(tokens, max_tokens) of them. */
static int boardless_query(const sim_boardless* bl, const char* mode, int max_tokens, const char* prompt,
                           size_t len, sim_reply* r) {
  if (boardless_fault(prompt, len) != 0) return -1;
  int n = bl->tokens;
  if (max_tokens > 0 && n > max_tokens) n = max_tokens;
  if (n < 0) n = 0;
  r->n = n;
  r->ttft_s = bl->ttft_s;
  r->prefill_s = bl->ttft_s;
  r->prompt_tokens = (int)(len / 4) + 1;
  r->decode_tokens = n;
  r->decode_s = n > 1 ? bl->decode_s * (n - 1) : 0;
  r->sleep_s = calloc((size_t)n + 1, sizeof(double));
  r->chunk = calloc((size_t)n + 1, sizeof(char*));
  for (int i = 0; i < n; i++) {
    const char* w = kBoardlessWords[i % 8];
    r->sleep_s[i] = i == 0 ? bl->ttft_s : bl->decode_s;
    if (strcmp(mode, "conv") == 0) {  /* the Conversation API streams JSON messages */
      if (asprintf(&r->chunk[i], "{\"role\": \"assistant\", \"content\": [{\"type\": \"text\", "
                                 "\"text\": \"%s\"}]}", w) < 0)
        r->chunk[i] = NULL;
    } else {
      r->chunk[i] = strdup(w);
    }
  }
  return 0;
}

int sim_oracle_open(sim_oracle* o, const char* kind, const char* payload) {
  memset(o, 0, sizeof(*o));
  pthread_mutex_init(&o->pipe_mu, NULL);
  pthread_mutex_init(&o->npu_mu, NULL);
  if (boardless(&o->bl) && !o->bl.answers) {
    o->init_s = o->bl.load_s;
    sim_sleep(o->bl.load_s, NULL);
    return 0;
  }
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) return -1;
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    return -1;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  char* argv[] = {"python3", "-S", "-c", (char*)kBoot, (char*)kind, NULL};
  int rc;
  if (o->bl.on) {
    const char* py = getenv("EDGE_LLM_SIM_PYTHON");
    char* bl_argv[] = {"python3", "-c", (char*)kBootBoardless, (char*)kind, NULL};
    rc = posix_spawnp(&o->pid, py && *py ? py : "python3", &fa, NULL, bl_argv, environ);
  } else {
    rc = posix_spawn(&o->pid, SIM_DIR "/python3", &fa, NULL, argv, environ);
  }
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  if (rc != 0) {
    fprintf(stderr, "%s: cannot start the NPU model of this virtual board (%s/python3: %s)\n", kind,
            SIM_DIR, strerror(rc));
    close(in[1]);
    close(out[0]);
    return -1;
  }
  o->to = fdopen(in[1], "w");
  o->from = fdopen(out[0], "r");
  size_t n = strlen(payload);
  fprintf(o->to, "L %zu\n", n);
  fwrite(payload, 1, n, o->to);
  fflush(o->to);
  char* line = read_line(o->from);
  double init_s = 0, sleep_s = 0;
  if (line == NULL || sscanf(line, "OK %lf %lf", &init_s, &sleep_s) != 2) {
    free(line);
    sim_oracle_close(o);
    return -1;
  }
  free(line);
  o->init_s = init_s;
  sim_sleep(sleep_s, NULL); /* the model load */
  return 0;
}

void sim_oracle_close(sim_oracle* o) {
  if (o->to) fclose(o->to);
  if (o->from) fclose(o->from);
  o->to = o->from = NULL;
  if (o->pid > 0) {
    int st;
    waitpid(o->pid, &st, 0);  /* it exits when its stdin closes */
    o->pid = 0;
  }
}

int sim_oracle_query(sim_oracle* o, const char* mode, int max_tokens, const char* prompt, size_t n,
                     sim_reply* r) {
  memset(r, 0, sizeof(*r));
  if (o->bl.on && !o->bl.answers) return boardless_query(&o->bl, mode, max_tokens, prompt, n, r);
  if (o->bl.on && boardless_fault(prompt, n) != 0) return -1;
  pthread_mutex_lock(&o->pipe_mu);
  int ok = -1;
  if (o->to == NULL) goto out;
  fprintf(o->to, "Q %s %d %zu\n", mode, max_tokens, n);
  fwrite(prompt, 1, n, o->to);
  if (fflush(o->to) != 0) goto out;
  char* line = read_line(o->from);
  if (line == NULL) goto out;
  int got = sscanf(line, "R %lf %lf %d %lf %d %d", &r->ttft_s, &r->prefill_s, &r->prompt_tokens,
                   &r->decode_s, &r->decode_tokens, &r->n);
  free(line);
  if (got != 6 || r->n < 0) goto out;
  r->sleep_s = calloc((size_t)r->n + 1, sizeof(double));
  r->chunk = calloc((size_t)r->n + 1, sizeof(char*));
  for (int i = 0; i < r->n; i++) {
    char* l = read_line(o->from);
    if (l == NULL) goto out;
    char* tab = strchr(l, '\t');
    if (tab == NULL) {
      free(l);
      goto out;
    }
    *tab = '\0';
    r->sleep_s[i] = atof(l);
    r->chunk[i] = strdup(tab + 1);
    free(l);
  }
  ok = 0;
out:
  pthread_mutex_unlock(&o->pipe_mu);
  return ok;
}

void sim_reply_free(sim_reply* r) {
  for (int i = 0; r->chunk && i < r->n; i++) free(r->chunk[i]);
  free(r->chunk);
  free(r->sleep_s);
  memset(r, 0, sizeof(*r));
}

int sim_sleep(double s, volatile int* cancel) {
  struct timespec end;
  clock_gettime(CLOCK_MONOTONIC, &end);
  long long ns = (long long)(s * 1e9);
  end.tv_sec += ns / 1000000000LL;
  end.tv_nsec += ns % 1000000000LL;
  if (end.tv_nsec >= 1000000000L) {
    end.tv_sec++;
    end.tv_nsec -= 1000000000L;
  }
  for (;;) {
    if (cancel && *cancel) return 1;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long long left = (end.tv_sec - now.tv_sec) * 1000000000LL + (end.tv_nsec - now.tv_nsec);
    if (left <= 0) return cancel && *cancel;
    struct timespec step = {0, left < 2000000 ? left : 2000000};  /* look at cancel every 2 ms */
    nanosleep(&step, NULL);
  }
}
