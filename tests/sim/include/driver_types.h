/* SPDX-License-Identifier: BSD-3-Clause */
/* cudasim: the CUDA runtime's handle types, flags and enums that localmap uses, with the names and
 * numeric values of CUDA 13's driver_types.h (so code written against the real header compiles
 * against this one and means the same). Only a subset of cudaError: a name missing here fails to
 * compile, which is the point (add it with its real value). */
#ifndef CUDASIM_DRIVER_TYPES_H_
#define CUDASIM_DRIVER_TYPES_H_

#include <stddef.h>

enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorCudartUnloading = 4,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidHostPointer = 16,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidKernelImage = 200,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalState = 401,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorLaunchTimeout = 702,
  cudaErrorHostMemoryAlreadyRegistered = 712,
  cudaErrorHostMemoryNotRegistered = 713,
  cudaErrorMisalignedAddress = 716,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotPermitted = 800,
  cudaErrorNotSupported = 801,
  cudaErrorTimeout = 909,
  cudaErrorUnknown = 999
};
typedef enum cudaError cudaError_t;

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;

#define cudaHostAllocDefault 0x00
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaEventInterprocess 0x04

enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3
};

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};

struct cudaPointerAttributes {
  enum cudaMemoryType type;
  int device;
  void *devicePointer;
  void *hostPointer;
  long reserved[8];
};

#endif /* CUDASIM_DRIVER_TYPES_H_ */
