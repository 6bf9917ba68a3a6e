/* SPDX-License-Identifier: BSD-3-Clause */
/* The C side of the Fortran layout test (tests/test_layout.f90 prints the same lines). */
#include <localmap.h>
#include <stddef.h>
#include <stdio.h>
#define SZ(T) printf(#T ".sizeof %zu\n", sizeof(T))
#define OFF(T, f) printf(#T "." #f " %zu\n", offsetof(T, f))
#define K(n) printf(#n " %lld\n", (long long)(n))
#define D(n) printf(#n " %d/%d/%d\n", (int)(n).code, (int)(n).bits, (int)(n).lanes)
int main(void) {
  SZ(DLDevice); OFF(DLDevice, device_type); OFF(DLDevice, device_id);
  SZ(DLDataType); OFF(DLDataType, code); OFF(DLDataType, bits); OFF(DLDataType, lanes);
  SZ(DLTensor); OFF(DLTensor, data); OFF(DLTensor, device); OFF(DLTensor, ndim); OFF(DLTensor, dtype);
  OFF(DLTensor, shape); OFF(DLTensor, strides); OFF(DLTensor, byte_offset);
  SZ(DLManagedTensor); OFF(DLManagedTensor, dl_tensor); OFF(DLManagedTensor, manager_ctx);
  OFF(DLManagedTensor, deleter);
  SZ(lm_placement_t); OFF(lm_placement_t, kind); OFF(lm_placement_t, dim); OFF(lm_placement_t, order);
  OFF(lm_placement_t, reduce_op); OFF(lm_placement_t, extents); OFF(lm_placement_t, block);
  OFF(lm_placement_t, source); OFF(lm_placement_t, reserved);
  SZ(lm_mesh_config_t); OFF(lm_mesh_config_t, size); OFF(lm_mesh_config_t, magic);
  OFF(lm_mesh_config_t, version); OFF(lm_mesh_config_t, ranks); OFF(lm_mesh_config_t, nranks);
  OFF(lm_mesh_config_t, dim_names); OFF(lm_mesh_config_t, check_level); OFF(lm_mesh_config_t, timeout);
  SZ(lm_device_config_t); OFF(lm_device_config_t, size); OFF(lm_device_config_t, magic);
  OFF(lm_device_config_t, version); OFF(lm_device_config_t, stream); OFF(lm_device_config_t, alloc);
  OFF(lm_device_config_t, free); OFF(lm_device_config_t, alloc_ctx);
  SZ(lm_reshard_entry_t); OFF(lm_reshard_entry_t, ndim); OFF(lm_reshard_entry_t, global_shape);
  OFF(lm_reshard_entry_t, dtype); OFF(lm_reshard_entry_t, src_placements);
  OFF(lm_reshard_entry_t, dst_placements);
  SZ(lm_reshard_group_config_t); OFF(lm_reshard_group_config_t, size);
  OFF(lm_reshard_group_config_t, magic); OFF(lm_reshard_group_config_t, version);
  OFF(lm_reshard_group_config_t, bucket_bytes);
  OFF(lm_reshard_group_config_t, alone_bytes);
  SZ(lm_local_map_options_t); OFF(lm_local_map_options_t, size);
  OFF(lm_local_map_options_t, magic); OFF(lm_local_map_options_t, version);
  OFF(lm_local_map_options_t, in_grad_placements); OFF(lm_local_map_options_t, record);
  SZ(lm_reshard_plan_info_t); OFF(lm_reshard_plan_info_t, size);
  OFF(lm_reshard_plan_info_t, magic); OFF(lm_reshard_plan_info_t, version);
  OFF(lm_reshard_plan_info_t, routes); OFF(lm_reshard_plan_info_t, reserved);
  OFF(lm_reshard_plan_info_t, steps); OFF(lm_reshard_plan_info_t, peers);
  OFF(lm_reshard_plan_info_t, flows_sent); OFF(lm_reshard_plan_info_t, flows_received);
  OFF(lm_reshard_plan_info_t, bytes_sent); OFF(lm_reshard_plan_info_t, bytes_received);
  OFF(lm_reshard_plan_info_t, bytes_copied); OFF(lm_reshard_plan_info_t, bytes_reduced);
  OFF(lm_reshard_plan_info_t, bytes_node_local); OFF(lm_reshard_plan_info_t, work_bytes);
  OFF(lm_reshard_plan_info_t, staging_bytes_max);
  SZ(lm_arg_t); OFF(lm_arg_t, kind); OFF(lm_arg_t, reserved); OFF(lm_arg_t, i64); OFF(lm_arg_t, f64);
  OFF(lm_arg_t, ptr);
  K(LM_VERSION_CODE);
  K(LM_SUCCESS); K(LM_ERR_INVALID_ARGUMENT); K(LM_ERR_INVALID_USAGE); K(LM_ERR_OUT_OF_MEMORY);
  K(LM_ERR_NOT_SUPPORTED); K(LM_ERR_MISMATCH); K(LM_ERR_MPI); K(LM_ERR_NCCL); K(LM_ERR_CUDA);
  K(LM_ERR_REMOTE); K(LM_ERR_INTERNAL); K(LM_ERR_USER); K(LM_ERR_TIMEOUT);
  K(LM_DEVICE_CONFIG_MAGIC); K(LM_DEVICE_CONFIG_VERSION);
  K(LM_TRANSPORT_UNDECIDED); K(LM_TRANSPORT_MPI); K(LM_TRANSPORT_NCCL); K(LM_TRANSPORT_MPI_STAGED);
  K(kDLCPU); K(kDLCUDA); K(kDLCUDAHost); K(kDLROCM); K(kDLCUDAManaged);
  K(kDLInt); K(kDLUInt); K(kDLFloat); K(kDLBfloat); K(kDLComplex); K(LM_DL_BOOL);
  K(LM_REPLICATE); K(LM_SHARD); K(LM_PARTIAL);
  K(LM_REDUCE_SUM); K(LM_REDUCE_AVG); K(LM_REDUCE_MAX); K(LM_REDUCE_MIN); K(LM_REDUCE_PROD);
  K(LM_SHAPE_GIVEN); K(LM_SHAPE_EVEN); K(LM_SHAPE_ALLGATHER);
  K(LM_FROM_LOCAL_COPY); K(LM_FROM_LOCAL_BORROW);
  K(LM_ARG_NONE); K(LM_ARG_DIST_TENSOR); K(LM_ARG_TENSOR); K(LM_ARG_INT64); K(LM_ARG_DOUBLE);
  K(LM_ARG_POINTER); K(LM_ARG_MANAGED_TENSOR);
  K(LM_LOCAL_MAP_RESHARD_INPUTS); K(LM_LOCAL_MAP_NO_AGREE); K(LM_LOCAL_MAP_SHAPES_EVEN);
  K(LM_MESH_CONFIG_MAGIC); K(LM_MESH_CONFIG_VERSION); K(LM_RESHARD_GROUP_CONFIG_VERSION);
  K(LM_RESHARD_PLAN_INFO_VERSION); K(LM_PLAN_INFO_ALL_RANKS);
  K(LM_RESHARD_GROUP_CONFIG_MAGIC); K(LM_RESHARD_PLAN_INFO_MAGIC); K(LM_LOCAL_MAP_OPTIONS_MAGIC);
  K(LM_LOCAL_MAP_OPTIONS_VERSION);
  K(LM_ROUTE_MPI); K(LM_ROUTE_NODE_LOCAL); K(LM_ROUTE_BOARD);
  D(LM_FLOAT16); D(LM_BFLOAT16); D(LM_FLOAT32); D(LM_FLOAT64); D(LM_INT8); D(LM_INT16); D(LM_INT32);
  D(LM_INT64); D(LM_UINT8); D(LM_BOOL); D(LM_COMPLEX64); D(LM_COMPLEX128);
  printf("LM_CPU.device_type %d\nLM_CPU.device_id %d\n", (int)LM_CPU.device_type, LM_CPU.device_id);
  return 0;
}
