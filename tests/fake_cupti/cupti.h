/* A stand-in for CUPTI's header, for the CPU tests of grader/grading/activity.c
 * (tests/test_activity.py): the few types and calls the library uses, and hooks (fake_cupti.c)
 * that hand it the records a test makes up. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#define CUPTIAPI
typedef void *CUcontext;
typedef enum { CUPTI_SUCCESS = 0, CUPTI_ERROR_MAX_LIMIT_REACHED = 1 } CUptiResult;
typedef enum {
  CUPTI_ACTIVITY_KIND_MEMCPY = 1,
  CUPTI_ACTIVITY_KIND_MEMSET = 2,
  CUPTI_ACTIVITY_KIND_KERNEL = 3,
  CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL = 10
} CUpti_ActivityKind;
#define CUPTI_ACTIVITY_FLAG_FLUSH_FORCED 1

typedef struct { CUpti_ActivityKind kind; } CUpti_Activity;
typedef struct {
  CUpti_ActivityKind kind;
  uint64_t start, end;
  uint32_t streamId, correlationId;
  int32_t gridX, gridY, gridZ, blockX, blockY, blockZ;
  const char *name;
} CUpti_ActivityKernel10;
typedef struct {
  CUpti_ActivityKind kind;
  uint64_t bytes, start, end;
  uint32_t streamId;
} CUpti_ActivityMemset4;
typedef struct {
  CUpti_ActivityKind kind;
  uint8_t copyKind;
  uint64_t bytes, start, end;
  uint32_t streamId;
} CUpti_ActivityMemcpy6;

typedef void (*CUpti_BuffersCallbackRequestFunc)(uint8_t **, size_t *, size_t *);
typedef void (*CUpti_BuffersCallbackCompleteFunc)(CUcontext, uint32_t, uint8_t *, size_t, size_t);
CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc,
                                           CUpti_BuffersCallbackCompleteFunc);
CUptiResult cuptiActivityEnable(CUpti_ActivityKind);
CUptiResult cuptiActivityFlushAll(uint32_t);
CUptiResult cuptiActivityGetNextRecord(uint8_t *, size_t, CUpti_Activity **);
CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t *);
