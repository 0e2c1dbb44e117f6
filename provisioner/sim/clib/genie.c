/* SIMULATED libGenie.so for edge-llm virtual boards - not Qualcomm's Genie.
 *
 * Exports the GenieDialog subset edge-llm-serve binds, with the signatures of the QAIRT SDK's
 * include/Genie/GenieDialog.h and GenieCommon.h (checked as edge-llm-serve's prototype table says:
 * GenieDialog_signal and _setMaxNumTokens as in the newest public header, the rest as in every copy): Genie_Status_t is int32_t (0 success, warnings
 * > 0 such as GENIE_STATUS_WARNING_ABORTED 1, errors < 0 such as GENIE_STATUS_ERROR_GENERAL -1).
 * GenieDialog_query blocks and calls the callback per chunk (SENTENCE_BEGIN, CONTINUE..., END);
 * GenieDialog_signal(ABORT) from another thread stops it (SENTENCE_ABORT, WARNING_ABORTED).
 * Speeds and faults come from provisioner.sim.npu.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "oracle.h"

__attribute__((used)) const char edge_llm_sim_stub_id[] = STANDIN_ID;

typedef int32_t Genie_Status_t;
#define GENIE_STATUS_SUCCESS 0
#define GENIE_STATUS_WARNING_ABORTED 1
#define GENIE_STATUS_ERROR_GENERAL -1
#define GENIE_STATUS_ERROR_INVALID_ARGUMENT -2
#define GENIE_STATUS_ERROR_INVALID_HANDLE -5
#define GENIE_STATUS_ERROR_QUERY_FAILED -6
#define GENIE_DIALOG_ACTION_ABORT 1
enum { SENTENCE_COMPLETE = 0, SENTENCE_BEGIN = 1, SENTENCE_CONTINUE = 2, SENTENCE_END = 3, SENTENCE_ABORT = 4 };

typedef void (*GenieDialog_QueryCallback_t)(const char* response, int sentence_code, const void* user_data);

typedef struct {
  char* json;
} Config;
typedef struct {
  sim_oracle oracle;
  volatile int abort;
  uint32_t max_tokens;
} Dialog;

Genie_Status_t GenieDialogConfig_createFromJson(const char* json, void** out) {
  if (json == NULL || out == NULL) return GENIE_STATUS_ERROR_INVALID_ARGUMENT;
  Config* c = calloc(1, sizeof(Config));
  c->json = strdup(json);
  *out = c;
  return GENIE_STATUS_SUCCESS;
}

Genie_Status_t GenieDialogConfig_free(void* p) {
  Config* c = p;
  if (c == NULL) return GENIE_STATUS_ERROR_INVALID_HANDLE;
  free(c->json);
  free(c);
  return GENIE_STATUS_SUCCESS;
}

Genie_Status_t GenieDialog_create(void* config, void** out) {
  Config* c = config;
  if (c == NULL || out == NULL) return GENIE_STATUS_ERROR_INVALID_ARGUMENT;
  Dialog* d = calloc(1, sizeof(Dialog));
  if (sim_oracle_open(&d->oracle, "genie", c->json) != 0) {
    free(d);
    return GENIE_STATUS_ERROR_GENERAL;
  }
  *out = d;
  return GENIE_STATUS_SUCCESS;
}

Genie_Status_t GenieDialog_query(void* p, const char* query, int sentence_code, GenieDialog_QueryCallback_t cb,
                                 const void* user_data) {
  Dialog* d = p;
  (void)sentence_code;
  if (d == NULL) return GENIE_STATUS_ERROR_INVALID_HANDLE;
  if (query == NULL || cb == NULL) return GENIE_STATUS_ERROR_INVALID_ARGUMENT;
  pthread_mutex_lock(&d->oracle.npu_mu);
  d->abort = 0;
  sim_reply r;
  if (sim_oracle_query(&d->oracle, "text", (int)d->max_tokens, query, strlen(query), &r) != 0) {
    pthread_mutex_unlock(&d->oracle.npu_mu);
    return GENIE_STATUS_ERROR_QUERY_FAILED;
  }
  int aborted = 0;
  for (int i = 0; i < r.n && !aborted; i++) {
    aborted = sim_sleep(r.sleep_s[i], &d->abort);
    if (!aborted) cb(r.chunk[i], i == 0 ? SENTENCE_BEGIN : SENTENCE_CONTINUE, user_data);
  }
  sim_reply_free(&r);
  cb("", aborted ? SENTENCE_ABORT : SENTENCE_END, user_data);
  pthread_mutex_unlock(&d->oracle.npu_mu);
  return aborted ? GENIE_STATUS_WARNING_ABORTED : GENIE_STATUS_SUCCESS;
}

Genie_Status_t GenieDialog_signal(void* p, int action) {
  Dialog* d = p;
  if (d == NULL) return GENIE_STATUS_ERROR_INVALID_HANDLE;
  if (action != GENIE_DIALOG_ACTION_ABORT) return GENIE_STATUS_ERROR_INVALID_ARGUMENT;
  d->abort = 1;
  return GENIE_STATUS_SUCCESS;
}

Genie_Status_t GenieDialog_setMaxNumTokens(void* p, uint32_t n) {
  Dialog* d = p;
  if (d == NULL) return GENIE_STATUS_ERROR_INVALID_HANDLE;
  d->max_tokens = n;
  return GENIE_STATUS_SUCCESS;
}

Genie_Status_t GenieDialog_reset(void* p) { return p ? GENIE_STATUS_SUCCESS : GENIE_STATUS_ERROR_INVALID_HANDLE; }

Genie_Status_t GenieDialog_free(void* p) {
  Dialog* d = p;
  if (d == NULL) return GENIE_STATUS_ERROR_INVALID_HANDLE;
  sim_oracle_close(&d->oracle);
  free(d);
  return GENIE_STATUS_SUCCESS;
}
