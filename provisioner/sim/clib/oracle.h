/* Stand-in NPU libraries of edge-llm virtual boards: the part both libraries share.
 *
 * SIMULATED - not LiteRT-LM, not Genie. The exported functions (litert_lm.c, genie.c) have the
 * signatures of the real C APIs; what a real library would learn from the NPU stack (QAIRT
 * build, skel, FastRPC access, memlock, board faults, speeds) is asked from a child process
 * running provisioner.sim.npu under the board's python (see that module for the protocol).
 * Prompts go to it through a pipe, never through argv.
 *
 * Board-less mode (tests of the service without a virtual board): when the environment has
 * EDGE_LLM_SIM_BOARDLESS="load_ms=N,ttft_ms=N,decode_ms=N,tokens=N" (any subset; defaults
 * 0, 5, 2, 8) no model process starts: every generation answers the fixed words
 * "alpha beta gamma ..." with those timings. A prompt containing CRASH aborts the process
 * (a runtime crash), one containing FAIL makes the query fail (a runtime error). With answers=1 in
 * the list the words come from the modelled model instead (provisioner.sim.npu.serve_boardless, run
 * under $EDGE_LLM_SIM_PYTHON, else python3 on PATH): tool prompts get calls in the family's syntax,
 * JSON instructions get JSON, with the same timings.
 */
#ifndef EDGE_LLM_SIM_ORACLE_H
#define EDGE_LLM_SIM_ORACLE_H

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

typedef struct {
  int on;
  double load_s, ttft_s, decode_s;
  int tokens;
  int answers;  /* 1: the modelled model's words (a child process), not the fixed words */
} sim_boardless;

typedef struct {
  pid_t pid;
  FILE* to;
  FILE* from;
  pthread_mutex_t pipe_mu;  /* one request/answer at a time on the pipe */
  pthread_mutex_t npu_mu;   /* one generation at a time on the NPU; others wait their turn */
  double init_s;            /* modelled load time (benchmark info) */
  sim_boardless bl;         /* EDGE_LLM_SIM_BOARDLESS timings, when set */
} sim_oracle;

typedef struct {
  double ttft_s, prefill_s, decode_s;
  int prompt_tokens, decode_tokens;
  int n;
  double* sleep_s;
  char** chunk;
} sim_reply;

/* Start the model process and load (kind "litert": payload = model path; "genie": config JSON).
 * Returns 0, or -1 with the runtime's error lines already on stderr. */
int sim_oracle_open(sim_oracle* o, const char* kind, const char* payload);
void sim_oracle_close(sim_oracle* o);
/* One generation's timing and chunks; 0 or -1. */
int sim_oracle_query(sim_oracle* o, const char* mode, int max_tokens, const char* prompt, size_t n,
                     sim_reply* r);
void sim_reply_free(sim_reply* r);
/* Sleep up to s seconds; returns 1 early when *cancel becomes non-zero. */
int sim_sleep(double s, volatile int* cancel);

#endif
