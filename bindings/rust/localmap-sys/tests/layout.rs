// SPDX-License-Identifier: BSD-3-Clause
//! Checks the declarations (DLPack's hand-written, localmap's generated from the header) against
//! the C headers: every struct's size, alignment and field offsets, and every constant's value. It
//! writes a small C program that prints them with sizeof/offsetof, compiles it with `$CC` (default
//! `cc`) against localmap.h, runs it, and compares.
use localmap_sys::*;
use std::collections::BTreeMap;
use std::mem::{align_of, size_of};
use std::process::Command;

/// The offset of a field (`offset_of!` needs Rust 1.77; Debian 12 ships 1.63).
macro_rules! offset_of {
    ($t:ty, $f:ident) => {{
        let u = std::mem::MaybeUninit::<$t>::uninit();
        let base = u.as_ptr();
        // SAFETY: addr_of! takes the field's address without reading the uninitialised value.
        unsafe { (std::ptr::addr_of!((*base).$f) as *const u8).offset_from(base as *const u8) as usize }
    }};
}

macro_rules! layout {
    ($t:ident { $($f:ident),* }) => {{
        let mut v = vec![(format!("{}.sizeof", stringify!($t)), size_of::<$t>() as i64),
                         (format!("{}.alignof", stringify!($t)), align_of::<$t>() as i64)];
        $( v.push((format!("{}.{}", stringify!($t), stringify!($f)), offset_of!($t, $f) as i64)); )*
        (stringify!($t), vec![$(stringify!($f)),*], v)
    }};
}

#[test]
fn structs_and_constants_match_the_c_header() {
    let structs = vec![
        layout!(DLDevice { device_type, device_id }),
        layout!(DLDataType { code, bits, lanes }),
        layout!(DLTensor { data, device, ndim, dtype, shape, strides, byte_offset }),
        layout!(DLManagedTensor { dl_tensor, manager_ctx, deleter }),
        layout!(lm_placement_t { kind, dim, order, reduce_op, extents, block, source, reserved }),
        layout!(lm_mesh_config_t { size, magic, version, ranks, nranks, dim_names, check_level, timeout }),
        layout!(lm_device_config_t { size, magic, version, stream, alloc, free, alloc_ctx }),
        layout!(lm_arg_t { kind, reserved, i64, f64, ptr }),
        layout!(lm_reshard_entry_t { ndim, global_shape, dtype, src_placements, dst_placements }),
        layout!(lm_reshard_group_config_t { size, magic, version, bucket_bytes, alone_bytes }),
        layout!(lm_reshard_plan_info_t { size, magic, version, routes, reserved, steps, peers, flows_sent,
                                          flows_received, bytes_sent, bytes_received, bytes_copied,
                                          bytes_reduced, bytes_node_local, work_bytes, staging_bytes_max }),
        layout!(lm_local_map_options_t { size, magic, version, in_grad_placements, record }),
    ];
    let dt = |d: DLDataType| (d.code as i64) | (d.bits as i64) << 8 | (d.lanes as i64) << 16;
    let consts: Vec<(&str, i64)> = vec![
        ("LM_VERSION_MAJOR", LM_VERSION_MAJOR as i64), ("LM_VERSION_MINOR", LM_VERSION_MINOR as i64),
        ("LM_VERSION_PATCH", LM_VERSION_PATCH as i64), ("LM_VERSION_CODE", LM_VERSION_CODE as i64),
        ("LM_SUCCESS", LM_SUCCESS as i64), ("LM_ERR_INVALID_ARGUMENT", LM_ERR_INVALID_ARGUMENT as i64),
        ("LM_ERR_INVALID_USAGE", LM_ERR_INVALID_USAGE as i64), ("LM_ERR_OUT_OF_MEMORY", LM_ERR_OUT_OF_MEMORY as i64),
        ("LM_ERR_NOT_SUPPORTED", LM_ERR_NOT_SUPPORTED as i64), ("LM_ERR_MISMATCH", LM_ERR_MISMATCH as i64),
        ("LM_ERR_MPI", LM_ERR_MPI as i64), ("LM_ERR_NCCL", LM_ERR_NCCL as i64), ("LM_ERR_CUDA", LM_ERR_CUDA as i64),
        ("LM_ERR_REMOTE", LM_ERR_REMOTE as i64), ("LM_ERR_INTERNAL", LM_ERR_INTERNAL as i64),
        ("LM_ERR_USER", LM_ERR_USER as i64), ("LM_ERR_TIMEOUT", LM_ERR_TIMEOUT as i64),
        ("LM_DEVICE_CONFIG_MAGIC", LM_DEVICE_CONFIG_MAGIC as i64),
        ("LM_DEVICE_CONFIG_VERSION", LM_DEVICE_CONFIG_VERSION as i64),
        ("LM_TRANSPORT_UNDECIDED", LM_TRANSPORT_UNDECIDED as i64), ("LM_TRANSPORT_MPI", LM_TRANSPORT_MPI as i64),
        ("LM_TRANSPORT_NCCL", LM_TRANSPORT_NCCL as i64), ("LM_TRANSPORT_MPI_STAGED", LM_TRANSPORT_MPI_STAGED as i64),
        ("kDLCPU", kDLCPU as i64), ("kDLCUDA", kDLCUDA as i64), ("kDLCUDAHost", kDLCUDAHost as i64),
        ("kDLCUDAManaged", kDLCUDAManaged as i64), ("kDLROCM", kDLROCM as i64),
        ("kDLInt", kDLInt as i64), ("kDLUInt", kDLUInt as i64), ("kDLFloat", kDLFloat as i64),
        ("kDLBfloat", kDLBfloat as i64), ("kDLComplex", kDLComplex as i64), ("LM_DL_BOOL", LM_DL_BOOL as i64),
        ("LM_REPLICATE", LM_REPLICATE as i64), ("LM_SHARD", LM_SHARD as i64), ("LM_PARTIAL", LM_PARTIAL as i64),
        ("LM_RAGGED", LM_RAGGED as i64), ("LM_BLOCK_CYCLIC", LM_BLOCK_CYCLIC as i64),
        ("LM_EXTENTS_AGREED", LM_EXTENTS_AGREED as i64), ("LM_SCALAPACK_DLEN", LM_SCALAPACK_DLEN as i64),
        ("LM_PLAN_INFO_ALL_RANKS", LM_PLAN_INFO_ALL_RANKS as i64), ("LM_ROUTE_MPI", LM_ROUTE_MPI as i64),
        ("LM_ROUTE_NODE_LOCAL", LM_ROUTE_NODE_LOCAL as i64), ("LM_ROUTE_BOARD", LM_ROUTE_BOARD as i64),
        ("LM_RECORD_INPUT", LM_RECORD_INPUT as i64), ("LM_RECORD_IN", LM_RECORD_IN as i64),
        ("LM_RECORD_IN_GRAD", LM_RECORD_IN_GRAD as i64), ("LM_RECORD_OUT", LM_RECORD_OUT as i64),
        ("LM_RECORD_OUT_GRAD", LM_RECORD_OUT_GRAD as i64), ("LM_LOCAL_MAP_MAX_ARGS", LM_LOCAL_MAP_MAX_ARGS as i64),
        ("LM_REDUCE_SUM", LM_REDUCE_SUM as i64), ("LM_REDUCE_AVG", LM_REDUCE_AVG as i64),
        ("LM_REDUCE_MAX", LM_REDUCE_MAX as i64), ("LM_REDUCE_MIN", LM_REDUCE_MIN as i64),
        ("LM_REDUCE_PROD", LM_REDUCE_PROD as i64),
        ("LM_MESH_CONFIG_MAGIC", LM_MESH_CONFIG_MAGIC as i64), ("LM_MESH_CONFIG_VERSION", LM_MESH_CONFIG_VERSION as i64),
        ("LM_SHAPE_GIVEN", LM_SHAPE_GIVEN as i64), ("LM_SHAPE_EVEN", LM_SHAPE_EVEN as i64),
        ("LM_SHAPE_ALLGATHER", LM_SHAPE_ALLGATHER as i64),
        ("LM_FROM_LOCAL_COPY", LM_FROM_LOCAL_COPY as i64), ("LM_FROM_LOCAL_BORROW", LM_FROM_LOCAL_BORROW as i64),
        ("LM_ARG_NONE", LM_ARG_NONE as i64), ("LM_ARG_DIST_TENSOR", LM_ARG_DIST_TENSOR as i64),
        ("LM_ARG_TENSOR", LM_ARG_TENSOR as i64), ("LM_ARG_INT64", LM_ARG_INT64 as i64),
        ("LM_ARG_DOUBLE", LM_ARG_DOUBLE as i64), ("LM_ARG_POINTER", LM_ARG_POINTER as i64),
        ("LM_ARG_MANAGED_TENSOR", LM_ARG_MANAGED_TENSOR as i64),
        ("LM_LOCAL_MAP_RESHARD_INPUTS", LM_LOCAL_MAP_RESHARD_INPUTS as i64),
        ("LM_LOCAL_MAP_NO_AGREE", LM_LOCAL_MAP_NO_AGREE as i64),
        ("LM_LOCAL_MAP_SHAPES_EVEN", LM_LOCAL_MAP_SHAPES_EVEN as i64),
        ("LM_RESHARD_GROUP_CONFIG_MAGIC", LM_RESHARD_GROUP_CONFIG_MAGIC as i64),
        ("LM_RESHARD_GROUP_CONFIG_VERSION", LM_RESHARD_GROUP_CONFIG_VERSION as i64),
        ("LM_RESHARD_PLAN_INFO_MAGIC", LM_RESHARD_PLAN_INFO_MAGIC as i64),
        ("LM_RESHARD_PLAN_INFO_VERSION", LM_RESHARD_PLAN_INFO_VERSION as i64),
        ("LM_LOCAL_MAP_OPTIONS_MAGIC", LM_LOCAL_MAP_OPTIONS_MAGIC as i64),
        ("LM_LOCAL_MAP_OPTIONS_VERSION", LM_LOCAL_MAP_OPTIONS_VERSION as i64),
    ];
    let dtypes: Vec<(&str, i64)> = vec![
        ("LM_FLOAT16", dt(LM_FLOAT16)), ("LM_BFLOAT16", dt(LM_BFLOAT16)), ("LM_FLOAT32", dt(LM_FLOAT32)),
        ("LM_FLOAT64", dt(LM_FLOAT64)), ("LM_INT8", dt(LM_INT8)), ("LM_INT16", dt(LM_INT16)),
        ("LM_INT32", dt(LM_INT32)), ("LM_INT64", dt(LM_INT64)), ("LM_UINT8", dt(LM_UINT8)),
        ("LM_BOOL", dt(LM_BOOL)), ("LM_COMPLEX64", dt(LM_COMPLEX64)), ("LM_COMPLEX128", dt(LM_COMPLEX128)),
    ];

    let mut c = String::from("#include <localmap.h>\n#include <stddef.h>\n#include <stdio.h>\n");
    c += "#define DT(x) ((long long)(x).code | (long long)(x).bits << 8 | (long long)(x).lanes << 16)\n";
    c += "int main(void) {\n";
    for (t, fields, _) in &structs {
        c += &format!("  printf(\"{t}.sizeof %lld\\n\", (long long)sizeof({t}));\n");
        c += &format!("  printf(\"{t}.alignof %lld\\n\", (long long)_Alignof({t}));\n");
        for f in fields {
            c += &format!("  printf(\"{t}.{f} %lld\\n\", (long long)offsetof({t}, {f}));\n");
        }
    }
    for (n, _) in &consts {
        c += &format!("  printf(\"{n} %lld\\n\", (long long)({n}));\n");
    }
    for (n, _) in &dtypes {
        c += &format!("  printf(\"{n} %lld\\n\", DT({n}));\n");
    }
    c += &format!("  printf(\"LM_CPU %lld\\n\", (long long)LM_CPU.device_type << 32 | LM_CPU.device_id);\n");
    c += "  return 0;\n}\n";

    let dir = std::env::temp_dir().join(format!("localmap-sys-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&src, c).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let inc = env!("LOCALMAP_INCLUDE_DIR");
    let status = Command::new(&cc).env_remove("LD_PRELOAD").arg("-std=c11").arg(format!("-I{inc}")).arg(&src).arg("-o").arg(&exe)
        .status()
        .unwrap_or_else(|e| panic!("layout test: cannot run the C compiler `{cc}` (set CC): {e}"));
    assert!(status.success(), "layout test: `{cc}` failed to compile {}", src.display());
    let out = Command::new(&exe).env_remove("LD_PRELOAD").output().expect("layout test: running the C program");
    assert!(out.status.success());
    let _ = std::fs::remove_dir_all(&dir);
    let c_values: BTreeMap<String, i64> = String::from_utf8(out.stdout).unwrap().lines()
        .map(|l| { let (k, v) = l.rsplit_once(' ').unwrap(); (k.to_string(), v.parse().unwrap()) })
        .collect();

    let mut rust_values: Vec<(String, i64)> = Vec::new();
    for (_, _, v) in structs { rust_values.extend(v); }
    rust_values.extend(consts.iter().map(|(n, v)| (n.to_string(), *v)));
    rust_values.extend(dtypes.iter().map(|(n, v)| (n.to_string(), *v)));
    rust_values.push(("LM_CPU".into(), (LM_CPU.device_type as i64) << 32 | LM_CPU.device_id as i64));
    let mut bad = Vec::new();
    for (k, v) in &rust_values {
        match c_values.get(k) {
            Some(cv) if cv == v => {}
            other => bad.push(format!("{k}: Rust {v}, C {other:?}")),
        }
    }
    assert!(bad.is_empty(), "layout/constant mismatches:\n  {}", bad.join("\n  "));
    assert_eq!(LM_MESH_CONFIG_INIT.size, size_of::<lm_mesh_config_t>());
    assert_eq!(LM_DEVICE_CONFIG_INIT.size, size_of::<lm_device_config_t>());
    assert_eq!(LM_RESHARD_GROUP_CONFIG_INIT.size, size_of::<lm_reshard_group_config_t>());
    assert_eq!(LM_RESHARD_PLAN_INFO_INIT.size, size_of::<lm_reshard_plan_info_t>());
    assert_eq!(LM_LOCAL_MAP_OPTIONS_INIT.size, size_of::<lm_local_map_options_t>());
    println!("layout: {} sizes, offsets and constants match the C header", rust_values.len());
}

#[test]
fn links_and_reports_the_version() {
    assert_eq!(unsafe { lm_get_version() }, LM_VERSION_CODE);
}
