! SPDX-License-Identifier: BSD-3-Clause
! Prints the size and field offsets of every bind(C) type of the module and the values of its
! named constants, in the format of the C program tests/script_fortran.sh compiles against
! localmap.h; the script compares the two outputs line by line.
program test_layout
  use, intrinsic :: iso_c_binding
  use localmap
  implicit none
  type(DLDevice), target :: dev
  type(DLDataType), target :: dt
  type(DLTensor), target :: t
  type(DLManagedTensor), target :: m
  type(lm_placement_t), target :: p
  type(lm_mesh_config_t), target :: cfg
  type(lm_arg_t), target :: a
  type(lm_device_config_t), target :: dc
  type(lm_reshard_entry_t), target :: re
  type(lm_reshard_group_config_t), target :: gc
  type(lm_local_map_options_t), target :: lo
  type(lm_reshard_plan_info_t), target :: pi

  call sz("DLDevice", c_sizeof(dev))
  call off("DLDevice", "device_type", c_loc(dev), c_loc(dev%device_type))
  call off("DLDevice", "device_id", c_loc(dev), c_loc(dev%device_id))
  call sz("DLDataType", c_sizeof(dt))
  call off("DLDataType", "code", c_loc(dt), c_loc(dt%code))
  call off("DLDataType", "bits", c_loc(dt), c_loc(dt%bits))
  call off("DLDataType", "lanes", c_loc(dt), c_loc(dt%lanes))
  call sz("DLTensor", c_sizeof(t))
  call off("DLTensor", "data", c_loc(t), c_loc(t%data))
  call off("DLTensor", "device", c_loc(t), c_loc(t%device))
  call off("DLTensor", "ndim", c_loc(t), c_loc(t%ndim))
  call off("DLTensor", "dtype", c_loc(t), c_loc(t%dtype))
  call off("DLTensor", "shape", c_loc(t), c_loc(t%shape))
  call off("DLTensor", "strides", c_loc(t), c_loc(t%strides))
  call off("DLTensor", "byte_offset", c_loc(t), c_loc(t%byte_offset))
  call sz("DLManagedTensor", c_sizeof(m))
  call off("DLManagedTensor", "dl_tensor", c_loc(m), c_loc(m%dl_tensor))
  call off("DLManagedTensor", "manager_ctx", c_loc(m), c_loc(m%manager_ctx))
  call off("DLManagedTensor", "deleter", c_loc(m), c_loc(m%deleter))
  call sz("lm_placement_t", c_sizeof(p))
  call off("lm_placement_t", "kind", c_loc(p), c_loc(p%kind))
  call off("lm_placement_t", "dim", c_loc(p), c_loc(p%dim))
  call off("lm_placement_t", "order", c_loc(p), c_loc(p%order))
  call off("lm_placement_t", "reduce_op", c_loc(p), c_loc(p%reduce_op))
  call off("lm_placement_t", "extents", c_loc(p), c_loc(p%extents))
  call off("lm_placement_t", "block", c_loc(p), c_loc(p%block))
  call off("lm_placement_t", "source", c_loc(p), c_loc(p%source))
  call off("lm_placement_t", "reserved", c_loc(p), c_loc(p%reserved))
  call sz("lm_mesh_config_t", c_sizeof(cfg))
  call off("lm_mesh_config_t", "size", c_loc(cfg), c_loc(cfg%size))
  call off("lm_mesh_config_t", "magic", c_loc(cfg), c_loc(cfg%magic))
  call off("lm_mesh_config_t", "version", c_loc(cfg), c_loc(cfg%version))
  call off("lm_mesh_config_t", "ranks", c_loc(cfg), c_loc(cfg%ranks))
  call off("lm_mesh_config_t", "nranks", c_loc(cfg), c_loc(cfg%nranks))
  call off("lm_mesh_config_t", "dim_names", c_loc(cfg), c_loc(cfg%dim_names))
  call off("lm_mesh_config_t", "check_level", c_loc(cfg), c_loc(cfg%check_level))
  call off("lm_mesh_config_t", "timeout", c_loc(cfg), c_loc(cfg%timeout))
  call sz("lm_device_config_t", c_sizeof(dc))
  call off("lm_device_config_t", "size", c_loc(dc), c_loc(dc%size))
  call off("lm_device_config_t", "magic", c_loc(dc), c_loc(dc%magic))
  call off("lm_device_config_t", "version", c_loc(dc), c_loc(dc%version))
  call off("lm_device_config_t", "stream", c_loc(dc), c_loc(dc%stream))
  call off("lm_device_config_t", "alloc", c_loc(dc), c_loc(dc%alloc))
  call off("lm_device_config_t", "free", c_loc(dc), c_loc(dc%free))
  call off("lm_device_config_t", "alloc_ctx", c_loc(dc), c_loc(dc%alloc_ctx))
  call sz("lm_reshard_entry_t", c_sizeof(re))
  call off("lm_reshard_entry_t", "ndim", c_loc(re), c_loc(re%ndim))
  call off("lm_reshard_entry_t", "global_shape", c_loc(re), c_loc(re%global_shape))
  call off("lm_reshard_entry_t", "dtype", c_loc(re), c_loc(re%dtype))
  call off("lm_reshard_entry_t", "src_placements", c_loc(re), c_loc(re%src_placements))
  call off("lm_reshard_entry_t", "dst_placements", c_loc(re), c_loc(re%dst_placements))
  call sz("lm_reshard_group_config_t", c_sizeof(gc))
  call off("lm_reshard_group_config_t", "size", c_loc(gc), c_loc(gc%size))
  call off("lm_reshard_group_config_t", "magic", c_loc(gc), c_loc(gc%magic))
  call off("lm_reshard_group_config_t", "version", c_loc(gc), c_loc(gc%version))
  call off("lm_reshard_group_config_t", "bucket_bytes", c_loc(gc), c_loc(gc%bucket_bytes))
  call off("lm_reshard_group_config_t", "alone_bytes", c_loc(gc), c_loc(gc%alone_bytes))
  call sz("lm_local_map_options_t", c_sizeof(lo))
  call off("lm_local_map_options_t", "size", c_loc(lo), c_loc(lo%size))
  call off("lm_local_map_options_t", "magic", c_loc(lo), c_loc(lo%magic))
  call off("lm_local_map_options_t", "version", c_loc(lo), c_loc(lo%version))
  call off("lm_local_map_options_t", "in_grad_placements", c_loc(lo), c_loc(lo%in_grad_placements))
  call off("lm_local_map_options_t", "record", c_loc(lo), c_loc(lo%record))
  call sz("lm_reshard_plan_info_t", c_sizeof(pi))
  call off("lm_reshard_plan_info_t", "size", c_loc(pi), c_loc(pi%size))
  call off("lm_reshard_plan_info_t", "magic", c_loc(pi), c_loc(pi%magic))
  call off("lm_reshard_plan_info_t", "version", c_loc(pi), c_loc(pi%version))
  call off("lm_reshard_plan_info_t", "routes", c_loc(pi), c_loc(pi%routes))
  call off("lm_reshard_plan_info_t", "reserved", c_loc(pi), c_loc(pi%reserved))
  call off("lm_reshard_plan_info_t", "steps", c_loc(pi), c_loc(pi%steps))
  call off("lm_reshard_plan_info_t", "peers", c_loc(pi), c_loc(pi%peers))
  call off("lm_reshard_plan_info_t", "flows_sent", c_loc(pi), c_loc(pi%flows_sent))
  call off("lm_reshard_plan_info_t", "flows_received", c_loc(pi), c_loc(pi%flows_received))
  call off("lm_reshard_plan_info_t", "bytes_sent", c_loc(pi), c_loc(pi%bytes_sent))
  call off("lm_reshard_plan_info_t", "bytes_received", c_loc(pi), c_loc(pi%bytes_received))
  call off("lm_reshard_plan_info_t", "bytes_copied", c_loc(pi), c_loc(pi%bytes_copied))
  call off("lm_reshard_plan_info_t", "bytes_reduced", c_loc(pi), c_loc(pi%bytes_reduced))
  call off("lm_reshard_plan_info_t", "bytes_node_local", c_loc(pi), c_loc(pi%bytes_node_local))
  call off("lm_reshard_plan_info_t", "work_bytes", c_loc(pi), c_loc(pi%work_bytes))
  call off("lm_reshard_plan_info_t", "staging_bytes_max", c_loc(pi), c_loc(pi%staging_bytes_max))
  call sz("lm_arg_t", c_sizeof(a))
  call off("lm_arg_t", "kind", c_loc(a), c_loc(a%kind))
  call off("lm_arg_t", "reserved", c_loc(a), c_loc(a%reserved))
  call off("lm_arg_t", "i64", c_loc(a), c_loc(a%i64))
  call off("lm_arg_t", "f64", c_loc(a), c_loc(a%f64))
  call off("lm_arg_t", "ptr", c_loc(a), c_loc(a%ptr))

  call k("LM_VERSION_CODE", LM_VERSION_CODE)
  call k("LM_SUCCESS", LM_SUCCESS); call k("LM_ERR_INVALID_ARGUMENT", LM_ERR_INVALID_ARGUMENT)
  call k("LM_ERR_INVALID_USAGE", LM_ERR_INVALID_USAGE); call k("LM_ERR_OUT_OF_MEMORY", LM_ERR_OUT_OF_MEMORY)
  call k("LM_ERR_NOT_SUPPORTED", LM_ERR_NOT_SUPPORTED); call k("LM_ERR_MISMATCH", LM_ERR_MISMATCH)
  call k("LM_ERR_MPI", LM_ERR_MPI); call k("LM_ERR_NCCL", LM_ERR_NCCL); call k("LM_ERR_CUDA", LM_ERR_CUDA)
  call k("LM_ERR_REMOTE", LM_ERR_REMOTE); call k("LM_ERR_INTERNAL", LM_ERR_INTERNAL)
  call k("LM_ERR_USER", LM_ERR_USER); call k("LM_ERR_TIMEOUT", LM_ERR_TIMEOUT)
  call k("LM_DEVICE_CONFIG_MAGIC", int(LM_DEVICE_CONFIG_MAGIC)); call k("LM_DEVICE_CONFIG_VERSION", int(LM_DEVICE_CONFIG_VERSION))
  call k("LM_TRANSPORT_UNDECIDED", LM_TRANSPORT_UNDECIDED); call k("LM_TRANSPORT_MPI", LM_TRANSPORT_MPI)
  call k("LM_TRANSPORT_NCCL", LM_TRANSPORT_NCCL); call k("LM_TRANSPORT_MPI_STAGED", LM_TRANSPORT_MPI_STAGED)
  call k("kDLCPU", kDLCPU); call k("kDLCUDA", kDLCUDA); call k("kDLCUDAHost", kDLCUDAHost)
  call k("kDLROCM", kDLROCM); call k("kDLCUDAManaged", kDLCUDAManaged)
  call k("kDLInt", kDLInt); call k("kDLUInt", kDLUInt); call k("kDLFloat", kDLFloat)
  call k("kDLBfloat", kDLBfloat); call k("kDLComplex", kDLComplex); call k("LM_DL_BOOL", LM_DL_BOOL)
  call k("LM_REPLICATE", LM_KIND_REPLICATE); call k("LM_SHARD", LM_KIND_SHARD)
  call k("LM_PARTIAL", LM_KIND_PARTIAL)
  call k("LM_REDUCE_SUM", LM_REDUCE_SUM); call k("LM_REDUCE_AVG", LM_REDUCE_AVG)
  call k("LM_REDUCE_MAX", LM_REDUCE_MAX); call k("LM_REDUCE_MIN", LM_REDUCE_MIN)
  call k("LM_REDUCE_PROD", LM_REDUCE_PROD)
  call k("LM_SHAPE_GIVEN", LM_SHAPE_GIVEN); call k("LM_SHAPE_EVEN", LM_SHAPE_EVEN)
  call k("LM_SHAPE_ALLGATHER", LM_SHAPE_ALLGATHER)
  call k("LM_FROM_LOCAL_COPY", LM_FROM_LOCAL_COPY); call k("LM_FROM_LOCAL_BORROW", LM_FROM_LOCAL_BORROW)
  call k("LM_ARG_NONE", LM_ARG_NONE); call k("LM_ARG_DIST_TENSOR", LM_ARG_DIST_TENSOR)
  call k("LM_ARG_TENSOR", LM_ARG_TENSOR); call k("LM_ARG_INT64", LM_ARG_INT64)
  call k("LM_ARG_DOUBLE", LM_ARG_DOUBLE); call k("LM_ARG_POINTER", LM_ARG_POINTER)
  call k("LM_ARG_MANAGED_TENSOR", LM_ARG_MANAGED_TENSOR)
  call k("LM_LOCAL_MAP_RESHARD_INPUTS", LM_LOCAL_MAP_RESHARD_INPUTS)
  call k("LM_LOCAL_MAP_NO_AGREE", LM_LOCAL_MAP_NO_AGREE)
  call k("LM_LOCAL_MAP_SHAPES_EVEN", LM_LOCAL_MAP_SHAPES_EVEN)
  call k("LM_MESH_CONFIG_MAGIC", int(LM_MESH_CONFIG_MAGIC)); call k("LM_MESH_CONFIG_VERSION", int(LM_MESH_CONFIG_VERSION))
  call k("LM_RESHARD_GROUP_CONFIG_VERSION", int(LM_RESHARD_GROUP_CONFIG_VERSION))
  call k("LM_RESHARD_PLAN_INFO_VERSION", int(LM_RESHARD_PLAN_INFO_VERSION))
  call k("LM_PLAN_INFO_ALL_RANKS", int(LM_PLAN_INFO_ALL_RANKS))
  call k("LM_RESHARD_GROUP_CONFIG_MAGIC", int(LM_RESHARD_GROUP_CONFIG_MAGIC))
  call k("LM_RESHARD_PLAN_INFO_MAGIC", int(LM_RESHARD_PLAN_INFO_MAGIC))
  call k("LM_LOCAL_MAP_OPTIONS_MAGIC", int(LM_LOCAL_MAP_OPTIONS_MAGIC))
  call k("LM_LOCAL_MAP_OPTIONS_VERSION", int(LM_LOCAL_MAP_OPTIONS_VERSION))
  call k("LM_ROUTE_MPI", int(LM_ROUTE_MPI)); call k("LM_ROUTE_NODE_LOCAL", int(LM_ROUTE_NODE_LOCAL))
  call k("LM_ROUTE_BOARD", int(LM_ROUTE_BOARD))
  call d("LM_FLOAT16", LM_FLOAT16); call d("LM_BFLOAT16", LM_BFLOAT16); call d("LM_FLOAT32", LM_FLOAT32)
  call d("LM_FLOAT64", LM_FLOAT64); call d("LM_INT8", LM_INT8); call d("LM_INT16", LM_INT16)
  call d("LM_INT32", LM_INT32); call d("LM_INT64", LM_INT64); call d("LM_UINT8", LM_UINT8)
  call d("LM_BOOL", LM_BOOL); call d("LM_COMPLEX64", LM_COMPLEX64); call d("LM_COMPLEX128", LM_COMPLEX128)
  call k("LM_CPU.device_type", int(LM_CPU%device_type)); call k("LM_CPU.device_id", int(LM_CPU%device_id))
contains
  subroutine sz(name, n)
    character(len=*), intent(in) :: name
    integer(c_size_t), intent(in) :: n
    write(*, '(a,a,i0)') name, ".sizeof ", n
  end subroutine
  subroutine off(name, field, base, at)
    character(len=*), intent(in) :: name, field
    type(c_ptr), intent(in) :: base, at
    write(*, '(a,".",a," ",i0)') name, field, transfer(at, 0_c_intptr_t) - transfer(base, 0_c_intptr_t)
  end subroutine
  subroutine k(name, v)
    character(len=*), intent(in) :: name
    integer, intent(in) :: v
    write(*, '(a," ",i0)') name, v
  end subroutine
  subroutine d(name, v)
    character(len=*), intent(in) :: name
    type(DLDataType), intent(in) :: v
    write(*, '(a," ",i0,"/",i0,"/",i0)') name, iand(int(v%code), 255), iand(int(v%bits), 255), int(v%lanes)
  end subroutine
end program
