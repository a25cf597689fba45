/* The part of CUDA's driver header cuda.h that gyre's device path uses: the types of
 * cuStreamWaitValue32 / cuStreamWriteValue32, which it looks up at run time
 * (cudaGetDriverEntryPointByVersion) and never links. For the fake CUDA runtime where no
 * toolkit is installed; see cuda_runtime_api.h beside it. */
#pragma once

#include <stdint.h>

#define CUDA_VERSION 13000

typedef uint32_t cuuint32_t;
typedef unsigned long long CUdeviceptr;
typedef struct CUstream_st* CUstream;

typedef enum cudaError_enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_PERMITTED = 800,
  CUDA_ERROR_NOT_SUPPORTED = 801
} CUresult;

typedef enum CUstreamWaitValue_flags_enum {
  CU_STREAM_WAIT_VALUE_GEQ = 0x0,
  CU_STREAM_WAIT_VALUE_EQ = 0x1,
  CU_STREAM_WAIT_VALUE_AND = 0x2,
  CU_STREAM_WAIT_VALUE_NOR = 0x3,
  CU_STREAM_WAIT_VALUE_FLUSH = 1 << 30
} CUstreamWaitValue_flags;

typedef enum CUstreamWriteValue_flags_enum {
  CU_STREAM_WRITE_VALUE_DEFAULT = 0x0,
  CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER = 0x1
} CUstreamWriteValue_flags;
