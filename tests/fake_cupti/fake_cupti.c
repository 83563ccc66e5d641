/* CUPTI's calls as the activity library uses them, over records a test makes up with
 * fake_kernel, fake_memset and fake_memcpy: cuptiActivityFlushAll hands them to the library's
 * buffer callback, as CUPTI does with what the GPU ran. */
#include <stdlib.h>
#include <string.h>
#include "cupti.h"

static CUpti_BuffersCallbackRequestFunc requested;
static CUpti_BuffersCallbackCompleteFunc completed;
static CUpti_Activity *queue[4096];
static size_t queued;

CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc r,
                                           CUpti_BuffersCallbackCompleteFunc c) {
  requested = r, completed = c;
  return CUPTI_SUCCESS;
}
CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) { (void)kind; return CUPTI_SUCCESS; }
CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext c, uint32_t s, size_t *dropped) {
  (void)c, (void)s;
  *dropped = 0;
  return CUPTI_SUCCESS;
}

void fake_kernel(const char *name, uint64_t start, uint64_t end, uint32_t stream) {
  CUpti_ActivityKernel10 *k = calloc(1, sizeof *k);
  k->kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, k->start = start, k->end = end;
  k->streamId = stream, k->gridX = 4, k->gridY = k->gridZ = 1, k->blockX = 128;
  k->blockY = k->blockZ = 1, k->name = strdup(name);
  queue[queued++] = (CUpti_Activity *)k;
}
void fake_memset(uint64_t bytes, uint64_t start, uint64_t end, uint32_t stream) {
  CUpti_ActivityMemset4 *m = calloc(1, sizeof *m);
  m->kind = CUPTI_ACTIVITY_KIND_MEMSET, m->bytes = bytes, m->start = start, m->end = end;
  m->streamId = stream;
  queue[queued++] = (CUpti_Activity *)m;
}
void fake_memcpy(uint64_t bytes, uint64_t start, uint64_t end, uint32_t stream) {
  CUpti_ActivityMemcpy6 *m = calloc(1, sizeof *m);
  m->kind = CUPTI_ACTIVITY_KIND_MEMCPY, m->bytes = bytes, m->start = start, m->end = end;
  m->streamId = stream, m->copyKind = 1;
  queue[queued++] = (CUpti_Activity *)m;
}

CUptiResult cuptiActivityFlushAll(uint32_t flag) {
  (void)flag;
  uint8_t *buffer;
  size_t size, most;
  requested(&buffer, &size, &most);
  memcpy(buffer, queue, queued * sizeof queue[0]);
  size_t valid = queued * sizeof queue[0];
  queued = 0;
  completed(NULL, 0, buffer, size, valid);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, CUpti_Activity **record) {
  CUpti_Activity **all = (CUpti_Activity **)buffer;
  size_t next = 0;
  if (*record != NULL) {
    while (next * sizeof all[0] < valid && all[next] != *record) next++;
    next++;
  }
  if (next * sizeof all[0] >= valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = all[next];
  return CUPTI_SUCCESS;
}
