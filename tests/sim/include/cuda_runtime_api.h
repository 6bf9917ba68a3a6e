/* SPDX-License-Identifier: BSD-3-Clause */
/* cudasim: the CUDA runtime API calls localmap, its tests and bench_device use, with the
 * signatures of CUDA 13's cuda_runtime_api.h (default arguments in C++ as there). Implemented by
 * libcudasim.so (tests/sim/lib), a simulated runtime on the host: see tests/sim/README.md. */
#ifndef CUDASIM_CUDA_RUNTIME_API_H_
#define CUDASIM_CUDA_RUNTIME_API_H_

#include "driver_types.h"
#include "vector_types.h"

#define CUDART_VERSION 13000
/* Identifies the simulator to code that must differ (src/device/launch.hpp). */
#define CUDASIM_VERSION 1

#ifdef __cplusplus
#define CUDASIM_DV(v) = v
extern "C" {
#else
#define CUDASIM_DV(v)
#endif

/* Errors */
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorName(cudaError_t error);
const char *cudaGetErrorString(cudaError_t error);

/* Devices */
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDriverGetVersion(int *driverVersion);
cudaError_t cudaRuntimeGetVersion(int *runtimeVersion);

/* Memory */
cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaFree(void *devPtr);
cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream);
cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream);
cudaError_t cudaMallocHost(void **ptr, size_t size);
cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream CUDASIM_DV(0));
cudaError_t cudaMemset(void *devPtr, int value, size_t count);
cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream CUDASIM_DV(0));

/* Streams and events */
cudaError_t cudaStreamCreate(cudaStream_t *pStream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags CUDASIM_DV(0));
cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream CUDASIM_DV(0));
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);

#ifdef __cplusplus
}
#endif
#undef CUDASIM_DV

#endif /* CUDASIM_CUDA_RUNTIME_API_H_ */
