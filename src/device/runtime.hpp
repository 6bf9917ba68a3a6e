// SPDX-License-Identifier: BSD-3-Clause
// The device component's calls of the CUDA runtime (runtime.cpp) and NCCL (nccl.cpp), each as the
// table of mem/device_api.hpp names it (component.cpp fills the table with them).
#pragma once

#include <cstddef>

namespace lm {
namespace device {

int device_count(int *n, char *why, size_t len);
int versions(int *runtime, int *driver, int *nccl);
int get_device(int *dev);
int set_device(int dev);
int pci_bus_id(int dev, char *buf, int len);
int pointer_kind(const void *p, int *kind, int *dev);
int malloc_async(void **p, size_t bytes, void *stream);
int free_async(void *p, void *stream);
int malloc_host(void **p, size_t bytes);
int free_host(void *p);
int memcpy_async(void *dst, const void *src, size_t bytes, int dir, void *stream);
int memset_async(void *p, int value, size_t bytes, void *stream);
int stream_synchronize(void *stream);
int event_create(void **ev);
int event_record(void *ev, void *stream);
int event_query(void *ev);
int event_synchronize(void *ev);
int event_destroy(void *ev);
int stream_wait_event(void *stream, void *ev);

void nccl_version(int *v);
int nccl_unique_id(void *id, size_t len);
int nccl_init(void **comm, int nranks, const void *id, int rank);
int nccl_async_error(void *comm);
int nccl_finalize(void *comm);
int nccl_destroy(void *comm);
int nccl_abort(void *comm);
int nccl_group_start();
int nccl_group_end();
int nccl_send(const void *p, size_t bytes, int peer, void *comm, void *stream);
int nccl_recv(void *p, size_t bytes, int peer, void *comm, void *stream);
int nccl_all_gather(const void *in, void *out, size_t bytes, void *comm, void *stream);
int nccl_reduce_scatter(const void *in, void *out, size_t count, int dtype, int op, void *comm,
                        void *stream);
int nccl_all_reduce(const void *in, void *out, size_t count, int dtype, int op, void *comm,
                    void *stream);
int nccl_all_to_all(const void *in, void *out, size_t bytes, void *comm, void *stream);
int nccl_reduces(int dtype, int op);
int nccl_has_all_to_all();

}  // namespace device
}  // namespace lm
