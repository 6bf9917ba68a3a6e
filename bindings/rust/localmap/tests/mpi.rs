// SPDX-License-Identifier: BSD-3-Clause
//! The safe crate's tests. They run on every rank of an MPI job: `cargo test` runs them as a
//! singleton (np 1), tests/script_rust.sh under `mpirun -np 2` and `-np 4`. A failing check prints
//! the rank and exits 1, which makes mpirun end the whole job (no rank is left waiting).
use localmap::*;

type T = std::result::Result<(), String>;

macro_rules! ensure {
    ($c:expr) => { if !$c { return Err(format!("{}:{}: {}", file!(), line!(), stringify!($c))); } };
    ($c:expr, $($m:tt)+) => { if !$c { return Err(format!("{}:{}: {}", file!(), line!(), format!($($m)+))); } };
}

fn e(err: Error) -> String {
    format!("unexpected error: {err}")
}

/// A mesh [size/2, 2] named {dp, tp} when the size is even and at least 4, else [size] named {dp}.
fn mesh2(size: i32) -> Result<Mesh> {
    let w = comm_world()?;
    if size % 2 == 0 && size >= 4 {
        Mesh::with_names(w, &[size as i64 / 2, 2], &["dp", "tp"])
    } else {
        Mesh::with_names(w, &[size as i64], &["dp"])
    }
}

fn statics() -> T {
    ensure!(version() == sys::LM_VERSION_CODE);
    ensure!(Status::InvalidArgument.as_str().contains("INVALID_ARGUMENT"));
    ensure!(Status::from_raw(11) == Status::User && Status::User.raw() == 11);
    ensure!(chunk(5, 4, 3).map_err(e)? == (5, 0)); // torch.chunk: 2, 2, 1, 0 from offsets 0, 2, 4, 5
    ensure!(chunk(5, 4, 0).map_err(e)? == (0, 2));
    let bad = chunk(5, 0, 0).unwrap_err();
    ensure!(bad.status == Status::InvalidArgument && !bad.message.is_empty(), "{bad}");
    let s = format_placements(&[Placement::Shard(0), Placement::Replicate, Placement::Partial(ReduceOp::Sum)])
        .map_err(e)?;
    ensure!(s == "[S(0), R, P(sum)]", "{s}");
    ensure!(device_supported(sys::kDLCPU).map_err(e)?);
    for p in [Placement::Replicate, Placement::Shard(2), Placement::ShardOrdered { dim: 1, order: 3 },
              Placement::Partial(ReduceOp::Max)] {
        ensure!(Placement::from_raw(p.raw()) == Some(p));
    }
    set_error_message("x");
    let mut t = ManagedTensor::alloc(&[2, 3], DType::F32, Device::Cpu).map_err(e)?;
    ensure!(t.shape() == vec![2, 3] && t.data::<f32>().map_err(e)?.iter().all(|&v| v == 0.0));
    t.data_mut::<f32>().map_err(e)?[5] = 1.5;
    ensure!(t.data::<f32>().map_err(e)?[5] == 1.5);
    ensure!(ManagedTensor::alloc(&[-1], DType::F32, Device::Cpu).unwrap_err().status == Status::InvalidArgument);
    ensure!(Status::from_raw(12) == Status::Timeout && Status::Timeout.raw() == 12);
    let (in_use, peak) = pool_stats(false).map_err(e)?;
    ensure!(in_use >= 0 && peak >= in_use, "pool {in_use} {peak}");
    Ok(())
}

fn mesh_queries(rank: i32, size: i32) -> T {
    let m = mesh2(size).map_err(e)?;
    let shape = m.shape().map_err(e)?;
    ensure!(m.ndim().map_err(e)? == shape.len());
    ensure!(m.size().map_err(e)? == size);
    ensure!(m.is_member().map_err(e)?);
    ensure!(m.rank().map_err(e)? == rank);
    let c = m.coord().map_err(e)?;
    ensure!(m.rank_at(&c).map_err(e)? == rank);
    ensure!(m.dim_index("dp").map_err(e)? == 0);
    ensure!(m.dim_name(0).map_err(e)? == "dp");
    let err = m.dim_index("nope").unwrap_err();
    ensure!(err.status == Status::InvalidArgument && err.message.contains("nope"), "{err}");
    ensure!(m.dim_comm(0).map_err(e)?.0 != m.comm().map_err(e)?.0 || size == 1 || shape.len() == 1);
    let _ = m.comm().map_err(e)?;
    // A mesh of rank 0 only: the others are not members.
    let sub = Mesh::with_config(comm_world().map_err(e)?, &[1], Some(&[0]), None).map_err(e)?;
    ensure!(sub.is_member().map_err(e)? == (rank == 0));
    if rank != 0 {
        ensure!(sub.rank().unwrap_err().status == Status::InvalidUsage);
    }
    // Cross-mesh reshard onto the rank-0 mesh: rank 0 gets the data, the others a placeholder.
    let full: Vec<f64> = (0..6).map(f64::from).collect();
    let x = DistTensor::from_global(&m, Some(&full[..]), &[6], &vec![Placement::Replicate; shape.len()], -1)
        .map_err(e)?;
    let y = x.reshard(Some(&sub), &[Placement::Replicate]).map_err(e)?;
    ensure!(y.global_shape().map_err(e)? == vec![6]);
    if rank == 0 {
        ensure!(y.local::<f64>().map_err(e)? == &full[..]);
    } else {
        ensure!(y.local::<f64>().map_err(e)?.is_empty() && y.local_shape().map_err(e)? == vec![0]);
        let p = DistTensor::from_local::<f64>(&sub, &[], &[0], &[Placement::Shard(0)], ShapeMode::Given(vec![6]))
            .map_err(e)?;
        ensure!(p.global_shape().map_err(e)? == vec![6], "placeholder from_local");
    }
    // Device config and transport.
    let o = Mesh::with_options(comm_world().map_err(e)?, &[size as i64],
                               &MeshOptions { check_level: Some(1), timeout: Some(60.0), ..MeshOptions::default() })
        .map_err(e)?;
    ensure!(o.transport(sys::kDLCPU).map_err(e)? == Transport::Mpi);
    let dc = o.device_config().map_err(e)?;
    ensure!(dc.stream.is_null() && dc.alloc.is_none());
    unsafe { o.set_device_config(Some(&dc)).map_err(e)? };
    unsafe { o.set_device_config(None).map_err(e)? };
    let mut bad_dc = dc;
    bad_dc.magic = 0;
    ensure!(unsafe { o.set_device_config(Some(&bad_dc)) }.unwrap_err().status == Status::InvalidArgument);
    // lm_tensor_alloc'd storage handed to a dist tensor.
    let mut mt = ManagedTensor::alloc(&[3], DType::I64, Device::Cpu).map_err(e)?;
    mt.data_mut::<i64>().map_err(e)?.copy_from_slice(&[7, 8, 9]);
    let d = DistTensor::from_dlpack(&o, mt, &[Placement::Replicate], ShapeMode::Given(vec![3])).map_err(e)?;
    ensure!(d.local::<i64>().map_err(e)? == &[7, 8, 9]);
    // Bad names are caught before C.
    ensure!(Mesh::with_names(comm_world().map_err(e)?, &[size as i64], &["a", "b"]).is_err());
    Ok(())
}

fn tensors(rank: i32, size: i32) -> T {
    let m = mesh2(size).map_err(e)?;
    let nd = m.ndim().map_err(e)?;
    let rep: Vec<Placement> = vec![Placement::Replicate; nd];
    let mut rows: Vec<Placement> = rep.clone();
    rows[0] = Placement::Shard(0);
    // 7 x 3 float64, rows split over dp (uneven).
    let full: Vec<f64> = (0..21).map(f64::from).collect();
    let x = DistTensor::from_global(&m, Some(&full[..]), &[7, 3], &rows, -1).map_err(e)?;
    ensure!(x.global_shape().map_err(e)? == vec![7, 3]);
    ensure!(x.ndim().map_err(e)? == 2 && x.dtype().map_err(e)? == DType::F64 && x.device().map_err(e)? == Device::Cpu);
    ensure!(x.placements().map_err(e)? == rows);
    let ls = x.local_shape().map_err(e)?;
    let off = x.local_offset().map_err(e)?;
    let dp = m.shape().map_err(e)?[0];
    let (o, l) = chunk(7, dp, m.coord().map_err(e)?[0]).map_err(e)?;
    ensure!(ls == vec![l, 3] && off == vec![o, 0], "{ls:?} {off:?}");
    let loc = x.local::<f64>().map_err(e)?;
    ensure!(loc == &full[(o * 3) as usize..((o + l) * 3) as usize]);
    ensure!(x.local::<f32>().unwrap_err().status == Status::InvalidArgument);
    ensure!(x.gather_all::<f64>().map_err(e)? == full);
    // gather at root 0 only.
    let mut back = vec![0.0; 21];
    x.gather(0, if rank == 0 { Some(&mut back[..]) } else { None }).map_err(e)?;
    ensure!(rank != 0 || back == full);
    // Clone shares by refcount: the clone outlives the original.
    let y = x.clone();
    drop(x);
    ensure!(y.local::<f64>().map_err(e)? == &full[(o * 3) as usize..((o + l) * 3) as usize]);
    ensure!(y.mesh().map_err(e)?.ndim().map_err(e)? == nd);
    // Reshard to Replicate.
    let r = y.reshard(None, &rep).map_err(e)?;
    ensure!(r.local::<f64>().map_err(e)? == &full[..]);
    // Its transpose [3, 7], replicated: element (j, i) is full[i * 3 + j].
    let t = y.transpose(&[1, 0], None, &rep).map_err(e)?;
    let tl = t.local::<f64>().map_err(e)?;
    ensure!(t.global_shape().map_err(e)? == vec![3, 7]);
    ensure!((0..21).all(|k| tl[k] == full[(k % 7) * 3 + k / 7]));
    ensure!(y.transpose(&[0, 0], None, &rep).unwrap_err().status == Status::InvalidArgument);
    // Into an existing [3, 7] tensor: the same values, overwritten in place.
    let mut into = DistTensor::zeros(&m, &[3, 7], DType::F64, Device::Cpu, &rep).map_err(e)?;
    y.transpose_into(&mut into, &[1, 0]).map_err(e)?;
    let il = into.local::<f64>().map_err(e)?;
    ensure!((0..21).all(|k| il[k] == full[(k % 7) * 3 + k / 7]));
    ensure!(y.transpose_into(&mut into, &[1]).unwrap_err().status == Status::InvalidArgument);
    // Export: a managed tensor holding a reference.
    let ex = r.to_dlpack().map_err(e)?;
    drop(r);
    ensure!(ex.data::<f64>().map_err(e)? == &full[..] && ex.shape() == vec![7, 3]);
    drop(ex);
    // Scatter from root 0 (int32).
    let ints: Vec<i32> = (0..10).collect();
    let mut cols = rep.clone();
    cols[nd - 1] = Placement::Shard(0);
    let s = DistTensor::from_global(&m, if m.rank().map_err(e)? == 0 { Some(&ints[..]) } else { None }, &[10], &cols, 0)
        .map_err(e)?;
    ensure!(s.gather_all::<i32>().map_err(e)? == ints);
    // from_local (copy) with uneven rows and ALLGATHER; from_vec (no copy) with GIVEN.
    let mine: Vec<f32> = (0..l * 2).map(|i| (o * 2 + i) as f32).collect();
    let a = DistTensor::from_local(&m, &mine, &[l, 2], &rows, ShapeMode::Allgather).map_err(e)?;
    ensure!(a.global_shape().map_err(e)? == vec![7, 2]);
    ensure!(a.gather_all::<f32>().map_err(e)? == (0..14).map(|i| i as f32).collect::<Vec<_>>());
    let b = DistTensor::from_vec(&m, mine.clone(), &[l, 2], &rows, ShapeMode::Given(vec![7, 2])).map_err(e)?;
    ensure!(b.gather_all::<f32>().map_err(e)? == a.gather_all::<f32>().map_err(e)?);
    // Wrong element count: caught before C, nothing leaks.
    ensure!(DistTensor::from_vec(&m, vec![1.0f32; 3], &[2, 2], &rows, ShapeMode::Even).is_err());
    // Bad placement from C: the message names the argument.
    let mut bad = rep.clone();
    bad[0] = Placement::Shard(5);
    let err = DistTensor::zeros(&m, &[4], DType::F64, Device::Cpu, &bad).unwrap_err();
    ensure!(err.status == Status::InvalidArgument && err.message.contains("placements"), "{err}");
    // zeros, bool and complex elements, local_mut.
    let mut z = DistTensor::zeros(&m, &[3, 2], DType::C128, Device::Cpu, &rep).map_err(e)?;
    unsafe { z.local_mut::<Complex<f64>>().map_err(e)?[1].im = 2.5 };
    ensure!(z.local::<Complex<f64>>().map_err(e)?[1] == Complex { re: 0.0, im: 2.5 });
    let flags = DistTensor::from_global(&m, Some(&[true, false, true][..]), &[3], &rep, -1).map_err(e)?;
    ensure!(flags.local::<bool>().map_err(e)? == &[true, false, true]);
    Ok(())
}

fn plans(_rank: i32, size: i32) -> T {
    let m = mesh2(size).map_err(e)?;
    let nd = m.ndim().map_err(e)?;
    let rep: Vec<Placement> = vec![Placement::Replicate; nd];
    let mut rows = rep.clone();
    rows[0] = Placement::Shard(0);
    let full: Vec<i64> = (0..30).collect();
    let x = DistTensor::from_global(&m, Some(&full[..]), &[10, 3], &rows, -1).map_err(e)?;
    let plan = ReshardPlan::new(&m, &rows, &m, &rep, &[10, 3], DType::I64).map_err(e)?;
    ensure!(!plan.describe().map_err(e)?.is_empty());
    let bytes = plan.bytes_sent().map_err(e)?;
    ensure!(bytes >= 0);
    // Every element of the replicated target, on every rank, is received or copied once.
    let (mine, all) = (plan.info(false).map_err(e)?, plan.info(true).map_err(e)?);
    ensure!(mine.bytes_sent == bytes && all.bytes_sent == all.bytes_received);
    ensure!(all.bytes_received + all.bytes_copied == 30 * 8 * size as i64);
    // The backward of rows -> replicated is a slice back to rows: nothing moves between ranks.
    ensure!(placements_adjoint(&[Placement::Partial(ReduceOp::Sum)]).map_err(e)? == vec![Placement::Replicate]);
    let back = plan.adjoint().map_err(e)?;
    ensure!(back.info(true).map_err(e)?.bytes_sent == 0);
    let mut y = plan.alloc_target(Device::Cpu).map_err(e)?;
    ensure!(y.local::<i64>().map_err(e)?.iter().all(|&v| v == 0));
    plan.execute(&x, &mut y).map_err(e)?;
    ensure!(y.local::<i64>().map_err(e)? == &full[..]);
    let mut z = plan.alloc_target(Device::Cpu).map_err(e)?;
    {
        let mut req = plan.start(&x, &mut z).map_err(e)?;
        while !req.test().map_err(e)? {}
        req.wait().map_err(e)?;
    }
    ensure!(z.local::<i64>().map_err(e)? == &full[..]);
    let w = plan.alloc_target(Device::Cpu).map_err(e)?;
    let mut w = w;
    plan.start(&x, &mut w).map_err(e)?.wait().map_err(e)?;
    ensure!(w.local::<i64>().map_err(e)? == &full[..]);
    // The wrong dtype for the plan.
    let f = DistTensor::from_global(&m, Some(&vec![0.0f64; 30][..]), &[10, 3], &rows, -1).map_err(e)?;
    let err = plan.execute(&f, &mut y).unwrap_err();
    ensure!(err.status == Status::InvalidArgument, "{err}");
    Ok(())
}

/// `reshard_estimate` gives what `ReshardPlan::info` reports for the plan built from the same
/// arguments, this rank's and every rank's; a bad argument names the function and the argument.
fn estimates(_rank: i32, size: i32) -> T {
    let m = Mesh::new(comm_world().map_err(e)?, &[size as i64]).map_err(e)?; // the world, 1-D
    let (s0, s1, r, psum) = (Placement::Shard(0), Placement::Shard(1), Placement::Replicate,
                             Placement::Partial(ReduceOp::Sum));
    let cases: [(&[i64], DType, Placement, Placement); 3] =
        [(&[7, 5], DType::F64, s0, r), (&[9, 4], DType::F32, psum, s0), (&[8, 6], DType::I32, s0, s1)];
    for (shape, dtype, src, dst) in cases {
        let plan = ReshardPlan::new(&m, &[src], &m, &[dst], shape, dtype).map_err(e)?;
        let (mine, all) = (plan.info(false).map_err(e)?, plan.info(true).map_err(e)?);
        let est = reshard_estimate(&m, &[src], None, &[dst], shape, dtype, false).map_err(e)?;
        ensure!(est == mine, "{src:?} -> {dst:?}: estimate {est:?}, plan {mine:?}");
        let est = reshard_estimate(&m, &[src], Some(&m), &[dst], shape, dtype, true).map_err(e)?;
        ensure!(est == all, "{src:?} -> {dst:?} (all ranks): estimate {est:?}, plan {all:?}");
    }
    let err = reshard_estimate(&m, &[Placement::Shard(2)], None, &[r], &[4], DType::F64, false).unwrap_err();
    ensure!(err.status == Status::InvalidArgument
            && err.message.contains("reshard_estimate: src_placements[0]: Placement::Shard dim 2"), "{err}");
    let err = reshard_estimate(&m, &[s0], None, &[r, r], &[4], DType::F64, false).unwrap_err();
    ensure!(err.status == Status::InvalidArgument
            && err.message.contains("reshard_estimate: dst_placements: 2 placements for a mesh of 1 dims"), "{err}");
    Ok(())
}

/// Local shards of two tensors of one dtype equal, bit for bit.
fn same_local(a: &DistTensor, b: &DistTensor) -> std::result::Result<bool, String> {
    if a.dtype().map_err(e)? != b.dtype().map_err(e)? || a.local_shape().map_err(e)? != b.local_shape().map_err(e)?
        || a.placements().map_err(e)? != b.placements().map_err(e)? {
        return Ok(false);
    }
    fn bits<F: Copy, B: PartialEq>(x: &[F], y: &[F], f: fn(F) -> B) -> bool {
        x.iter().map(|v| f(*v)).eq(y.iter().map(|v| f(*v)))
    }
    Ok(match a.dtype().map_err(e)? {
        DType::F64 => bits(a.local::<f64>().map_err(e)?, b.local::<f64>().map_err(e)?, f64::to_bits),
        DType::F32 => bits(a.local::<f32>().map_err(e)?, b.local::<f32>().map_err(e)?, f32::to_bits),
        DType::I32 => a.local::<i32>().map_err(e)? == b.local::<i32>().map_err(e)?,
        other => return Err(format!("same_local: no comparison for {other:?}")),
    })
}

fn all_same(outs: &[DistTensor], refs: &[DistTensor], what: &str) -> T {
    ensure!(outs.len() == refs.len(), "{what}: {} results for {} entries", outs.len(), refs.len());
    for (i, (o, r)) in outs.iter().zip(refs).enumerate() {
        ensure!(same_local(o, r)?, "{what}: entry {i} differs from its per-tensor reshard");
    }
    Ok(())
}

/// A source for entry `i`: values depending on the entry (and, for a Partial source, the rank).
fn group_source(m: &Mesh, rank: i32, i: usize, shape: &[i64], dtype: DType, pl: &[Placement]) -> Result<DistTensor> {
    let n: i64 = shape.iter().product();
    let partial = matches!(pl[0], Placement::Partial(_));
    let vals: Vec<i64> = (0..n)
        .map(|k| (k * 7 + i as i64 * 131 + if partial { rank as i64 * 17 } else { 0 }) % 97 - 40)
        .collect();
    macro_rules! make {
        ($t:ty) => {{
            let v: Vec<$t> = vals.iter().map(|&x| x as $t).collect();
            if partial {
                DistTensor::from_local(m, &v, shape, pl, ShapeMode::Given(shape.to_vec()))
            } else {
                DistTensor::from_global(m, Some(&v[..]), shape, pl, -1)
            }
        }};
    }
    match dtype {
        DType::F64 => make!(f64),
        DType::F32 => make!(f32),
        _ => make!(i32),
    }
}

/// Grouped reshards: a group of mixed entries (all-gather of uneven rows, reduce-scatter,
/// all-to-all, a slice) gives every entry the per-tensor reshard's result, for several bucket
/// bounds, blocking and nonblocking, across meshes, and through reshard_many; bad arguments are
/// refused naming them.
fn groups(rank: i32, size: i32) -> T {
    let w = comm_world().map_err(e)?;
    let m = Mesh::new(w, &[size as i64]).map_err(e)?;
    let (s0, s1, r, psum) = (Placement::Shard(0), Placement::Shard(1), Placement::Replicate,
                             Placement::Partial(ReduceOp::Sum));
    let shapes: [&[i64]; 4] = [&[7, 5], &[9, 4], &[8, 6], &[11]];
    let (from, to) = ([[s0], [psum], [s0], [r]], [[r], [s0], [s1], [s0]]);
    let dtypes = [DType::F64, DType::F64, DType::F32, DType::I32];
    let entries: Vec<ReshardEntry<'_>> =
        (0..4).map(|i| ReshardEntry::new(shapes[i], dtypes[i], &from[i], &to[i])).collect();
    let srcs = (0..4).map(|i| group_source(&m, rank, i, shapes[i], dtypes[i], &from[i]))
        .collect::<Result<Vec<_>>>().map_err(e)?;
    let refs = srcs.iter().zip(&to).map(|(x, p)| x.reshard(None, p)).collect::<Result<Vec<_>>>().map_err(e)?;
    // The defaults (one bucket), every entry alone (by either bound), a few buckets.
    for (bucket, alone) in [(None, None), (Some(1), None), (None, Some(1)), (Some(700), None)] {
        let what = format!("bucket_bytes {bucket:?}, alone_bytes {alone:?}");
        let options = ReshardGroupOptions { bucket_bytes: bucket, alone_bytes: alone };
        let g = ReshardGroup::with_options(&m, None, &entries, &options).map_err(e)?;
        let (n, b) = (g.len().map_err(e)?, g.buckets().map_err(e)?);
        let all_alone = bucket == Some(1) || alone == Some(1);
        ensure!(n == 4 && (1..=4).contains(&b) && (!all_alone || b == 4), "{what}: {n} entries, {b} buckets");
        let mut dsts = g.alloc_targets(Device::Cpu).map_err(e)?;
        ensure!(dsts.len() == 4 && dsts[2].placements().map_err(e)? == vec![s1]);
        for _ in 0..2 { // the group runs again with its state reused
            g.execute(&srcs, &mut dsts).map_err(e)?;
            all_same(&dsts, &refs, &what)?;
        }
        let mut fresh = g.alloc_targets(Device::Cpu).map_err(e)?;
        {
            let mut req = g.start(&srcs, &mut fresh).map_err(e)?;
            while !req.test().map_err(e)? {}
            req.wait().map_err(e)?;
        }
        all_same(&fresh, &refs, &format!("{what}, start"))?;
        let borrowed: Vec<&DistTensor> = srcs.iter().collect(); // slices of references work too
        let mut targets: Vec<&mut DistTensor> = dsts.iter_mut().collect();
        g.start(&borrowed, &mut targets).map_err(e)?.wait().map_err(e)?;
        all_same(&dsts, &refs, &format!("{what}, start again"))?;
    }
    // Across meshes: to the same ranks in reverse order.
    let rev: Vec<i32> = (0..size).rev().collect();
    let m_rev = Mesh::with_config(w, &[size as i64], Some(&rev), None).map_err(e)?;
    let cross_refs = srcs.iter().zip(&to).map(|(x, p)| x.reshard(Some(&m_rev), p)).collect::<Result<Vec<_>>>()
        .map_err(e)?;
    let g = ReshardGroup::new(&m, Some(&m_rev), &entries).map_err(e)?;
    let mut dsts = g.alloc_targets(Device::Cpu).map_err(e)?;
    g.execute(&srcs, &mut dsts).map_err(e)?;
    all_same(&dsts, &cross_refs, "across meshes")?;
    // reshard_many, onto the tensors' mesh and across meshes.
    all_same(&reshard_many(&srcs, None, &to).map_err(e)?, &refs, "reshard_many")?;
    all_same(&reshard_many(&srcs, Some(&m_rev), &to).map_err(e)?, &cross_refs, "reshard_many across")?;
    ensure!(reshard_many::<DistTensor, [Placement; 1]>(&[], None, &[]).map_err(e)?.is_empty());
    let empty = ReshardGroup::new(&m, None, &[]).map_err(e)?;
    ensure!(empty.is_empty().map_err(e)? && empty.buckets().map_err(e)? == 0);
    empty.execute::<DistTensor, DistTensor>(&[], &mut []).map_err(e)?;

    // Bad arguments: refused naming them; the group still works afterwards.
    let shape = [12i64];
    let x = (0..2).map(|_| DistTensor::from_global(&m, Some(&[1.5f64; 12][..]), &shape, &[s0], -1))
        .collect::<Result<Vec<_>>>().map_err(e)?;
    let ok = ReshardEntry::new(&shape, DType::F64, &from[0], &to[0]);
    let err = ReshardGroup::new(&m, None, &[ok, ReshardEntry::new(&shape, DType::F64, &[s0], &[r, r])]).unwrap_err();
    ensure!(err.status == Status::InvalidArgument
            && err.message.contains("entries[1].dst_placements: 2 placements for a mesh of 1 dims"), "{err}");
    let err = ReshardGroup::new(&m, None, &[ok, ReshardEntry::new(&shape, DType::F64, &[s0], &[Placement::Shard(3)])])
        .unwrap_err();
    ensure!(err.status == Status::InvalidArgument && err.message.contains("ReshardGroup::new: entries[1]"), "{err}");
    let g = ReshardGroup::new(&m, None, &[ok, ok]).map_err(e)?;
    let mut y = g.alloc_targets(Device::Cpu).map_err(e)?;
    let err = g.execute(&x[..1], &mut y[..1]).unwrap_err(); // one tensor for a group of 2
    ensure!(err.status == Status::InvalidArgument && err.message.contains("ReshardGroup::execute: src: 1 tensors for a group of 2"),
            "{err}");
    let err = g.execute(&x, &mut y[..1]).unwrap_err();
    ensure!(err.status == Status::InvalidArgument && err.message.contains("dst: 1 tensors for 2 src tensors"), "{err}");
    let err = g.start(&x, &mut y[..1]).map(|_| ()).unwrap_err();
    ensure!(err.status == Status::InvalidArgument && err.message.contains("ReshardGroup::start: dst"), "{err}");
    let mut twice = vec![y[0].clone(), y[0].clone()]; // clones share storage: overlapping targets
    let err = g.execute(&x, &mut twice).unwrap_err();
    ensure!(err.status == Status::InvalidArgument && err.message.contains("dst[1]"), "{err}");
    g.execute(&x, &mut y).map_err(e)?;
    ensure!(y.iter().all(|t| t.local::<f64>().map(|v| v == &[1.5; 12][..]).unwrap_or(false)));
    let err = reshard_many(&x, None, &[[r]]).unwrap_err();
    ensure!(err.status == Status::InvalidArgument && err.message.contains("placements: 1 entries for 2 tensors"),
            "{err}");
    let err = reshard_many(&x, None, &[vec![r], vec![]]).unwrap_err();
    ensure!(err.status == Status::InvalidArgument
            && err.message.contains("reshard_many: placements[1]: 0 placements for a mesh of 1 dims"), "{err}");
    Ok(())
}

fn local_maps(rank: i32, size: i32) -> T {
    let m = mesh2(size).map_err(e)?;
    let nd = m.ndim().map_err(e)?;
    let rep: Vec<Placement> = vec![Placement::Replicate; nd];
    let mut rows = rep.clone();
    rows[0] = Placement::Shard(0);
    let mut psum = rep.clone();
    psum[0] = Placement::Partial(ReduceOp::Sum);
    let full: Vec<f64> = (0..30).map(f64::from).collect();
    let x = DistTensor::from_global(&m, Some(&full[..]), &[10, 3], &rep, -1).map_err(e)?;
    // Sum of the row shard (the input is resharded to rows), an int and a double passed through.
    let mut calls = 0;
    let outs = LocalMap::new()
        .input_as(Arg::Dist(&x), &rows)
        .input(Arg::Int(7))
        .input(Arg::Double(0.5))
        .output(&psum)
        .output_value()
        .output_shaped(&rows, &[10, 3])
        .reshard_inputs()
        .run(|ctx, inp| {
            calls += 1;
            let t = inp[0].tensor()?;
            let k = inp[1].int()?;
            let h = inp[2].double()?;
            let s: f64 = t.data::<f64>()?.iter().sum();
            let doubled: Vec<f64> = t.data::<f64>()?.iter().map(|v| v * 2.0).collect();
            if ctx.mesh().ndim()? != nd || t.shape().len() != 2 {
                return Err("wrong mesh or shape inside fn".into());
            }
            Ok(vec![Out::tensor(vec![s * h], &[1])?, Out::Int(k + 1), Out::tensor(doubled, &t.shape())?])
        })
        .map_err(e)?;
    ensure!(calls == 1);
    let mut it = outs.into_iter();
    let total = it.next().unwrap().into_dist().map_err(e)?;
    ensure!(total.gather_all::<f64>().map_err(e)? == vec![435.0 * 0.5]);
    ensure!(matches!(it.next(), Some(Output::Int(8))));
    let dbl = it.next().unwrap().into_dist().map_err(e)?;
    ensure!(dbl.gather_all::<f64>().map_err(e)? == full.iter().map(|v| v * 2.0).collect::<Vec<_>>());

    // An Err on the last rank: that rank sees User with the text, the others Remote.
    let bad = size - 1;
    let err = LocalMap::new()
        .input(Arg::Dist(&x))
        .output(&rep)
        .run(|_, _| if rank == bad { Err("the sky fell".into()) } else { Ok(vec![Out::tensor(vec![1.0f64], &[1])?]) })
        .unwrap_err();
    if rank == bad {
        ensure!(err.status == Status::User && err.message.contains("the sky fell"), "{err}");
    } else {
        ensure!(err.status == Status::Remote, "{err}");
    }
    // A panic on rank 0: caught, a failed status everywhere, no abort.
    let err = LocalMap::new()
        .input(Arg::Dist(&x))
        .output(&rep)
        .run(|_, _| {
            if rank == 0 {
                panic!("boom on rank {rank}");
            }
            Ok(vec![Out::tensor(vec![1.0f64], &[1])?])
        })
        .unwrap_err();
    if rank == 0 {
        ensure!(err.status == Status::User && err.message.contains("boom on rank 0"), "{err}");
    } else {
        ensure!(err.status == Status::Remote, "{err}");
    }
    // Too few outputs returned.
    let err = LocalMap::new().input(Arg::Dist(&x)).output(&rep).run(|_, _| Ok(vec![])).unwrap_err();
    ensure!(err.status == Status::User && err.message.contains("returned 0 outputs"), "{err}");
    // The mesh still works after the failures.
    let again = LocalMap::new()
        .mesh(&m)
        .input(Arg::Dist(&x))
        .output(&rep)
        .run(|_, inp| Ok(vec![Out::tensor(vec![inp[0].tensor()?.shape()[0] as i64], &[1])?]))
        .map_err(e)?;
    let v = again.into_iter().next().unwrap().into_dist().map_err(e)?;
    ensure!(v.local::<i64>().map_err(e)? == &[10]);
    Ok(())
}

/// `run_recorded`: the record says where gradients go, and `input_grad` sums a replicated
/// input's Partial(sum) gradient (each rank contributes ones: the rank count everywhere).
fn local_map_records(_rank: i32, size: i32) -> T {
    let m = Mesh::new(comm_world().map_err(e)?, &[size as i64]).map_err(e)?;
    let (r, psum) = (Placement::Replicate, Placement::Partial(ReduceOp::Sum));
    let w = DistTensor::from_global(&m, Some(&[1.0f64; 4][..]), &[4], &[r], -1).map_err(e)?;
    let ones = |_: &Ctx<'_>, inp: &[Local<'_>]| -> std::result::Result<Vec<Out>, FnError> {
        let n = inp[0].tensor()?.shape()[0] as usize;
        Ok(vec![Out::tensor(vec![1.0f64; n], &[n as i64])?])
    };
    let (outs, rec) = LocalMap::new()
        .input(Arg::Dist(&w))
        .grad_placements(&[psum])
        .output(&[psum])
        .run_recorded(ones)
        .map_err(e)?;
    ensure!(outs.len() == 1);
    ensure!(rec.placements(RecordWhich::Input, 0).map_err(e)? == vec![r]);
    ensure!(rec.placements(RecordWhich::In, 0).map_err(e)? == vec![r]);
    ensure!(rec.placements(RecordWhich::InGrad, 0).map_err(e)? == vec![psum]);
    ensure!(rec.placements(RecordWhich::Out, 0).map_err(e)? == vec![psum]);
    ensure!(rec.placements(RecordWhich::OutGrad, 0).map_err(e)? == vec![r]);
    let back = LocalMap::new()
        .input(Arg::Dist(&w))
        .output(&rec.placements(RecordWhich::InGrad, 0).map_err(e)?)
        .run(ones)
        .map_err(e)?;
    let view = back.into_iter().next().unwrap().into_dist().map_err(e)?;
    let dw = rec.input_grad(0, &view).map_err(e)?;
    ensure!(dw.placements().map_err(e)? == vec![r]);
    ensure!(dw.local::<f64>().map_err(e)? == &[size as f64; 4]);
    let err = rec.placements(RecordWhich::In, 1).unwrap_err();
    ensure!(err.status == Status::InvalidArgument && err.message.contains("index 1"), "{err}");
    let err = LocalMap::new().input(Arg::Dist(&w)).grad_placements(&[r, r]).output(&[r]).run_recorded(ones).unwrap_err();
    ensure!(err.message.contains("grad_placements of inputs[0]: 2 placements"), "{err}");
    Ok(())
}

/// Every slice of placements the safe API takes is checked against the mesh's ndim (issue 19:
/// an empty slice reached the C library as a dangling pointer and crashed; a longer one was
/// silently cut), and so is a `ShapeMode::Given` shape against the tensor's ndim.
fn slice_lengths(_rank: i32, size: i32) -> T {
    let m1 = Mesh::new(comm_world().map_err(e)?, &[size as i64]).map_err(e)?; // 1-D
    let m2 = Mesh::new(comm_world().map_err(e)?, &[1, size as i64]).map_err(e)?; // 2-D
    let full: Vec<f64> = (0..48).map(f64::from).collect();
    let (s0, r) = (Placement::Shard(0), Placement::Replicate);
    let is_arg = |err: &Error, what: &str, n: usize, nd: usize| {
        err.status == Status::InvalidArgument && err.message.contains(what)
            && err.message.contains(&format!("{n} placements for a mesh of {nd} dims"))
    };
    let err = DistTensor::from_global(&m1, Some(&full[..]), &[8, 6], &[], -1).unwrap_err();
    ensure!(is_arg(&err, "DistTensor::from_global: placements", 0, 1), "{err}");
    let err = DistTensor::from_global(&m1, Some(&full[..]), &[8, 6], &[s0, r, r], -1).unwrap_err();
    ensure!(is_arg(&err, "DistTensor::from_global: placements", 3, 1), "{err}");
    let err = DistTensor::from_global(&m2, Some(&full[..]), &[8, 6], &[s0], -1).unwrap_err();
    ensure!(is_arg(&err, "DistTensor::from_global: placements", 1, 2), "{err}");
    let err = DistTensor::zeros(&m2, &[8, 6], DType::F64, Device::Cpu, &[r]).unwrap_err();
    ensure!(is_arg(&err, "DistTensor::zeros: placements", 1, 2), "{err}");
    let err = DistTensor::from_local(&m1, &full[..], &[8, 6], &[], ShapeMode::Allgather).unwrap_err();
    ensure!(is_arg(&err, "DistTensor::from_local: placements", 0, 1), "{err}");
    let err = DistTensor::from_local(&m1, &full[..], &[8, 6], &[r], ShapeMode::Given(vec![8])).unwrap_err();
    ensure!(err.status == Status::InvalidArgument && err.message.contains("ShapeMode::Given has 1 extents"), "{err}");
    let err = DistTensor::from_vec(&m1, full.clone(), &[8, 6], &[r, r], ShapeMode::Even).unwrap_err();
    ensure!(is_arg(&err, "DistTensor::from_dlpack: placements", 2, 1), "{err}");
    let x = DistTensor::from_global(&m1, Some(&full[..]), &[8, 6], &[s0], -1).map_err(e)?;
    let err = x.reshard(None, &[]).unwrap_err();
    ensure!(is_arg(&err, "DistTensor::reshard: placements", 0, 1), "{err}");
    let err = x.reshard(Some(&m2), &[r]).unwrap_err();
    ensure!(is_arg(&err, "DistTensor::reshard: placements", 1, 2), "{err}");
    // On the 2-D mesh itself: one placement too few for every call that takes a slice of them.
    let x2 = DistTensor::from_global(&m2, Some(&full[..]), &[8, 6], &[r, s0], -1).map_err(e)?;
    let err = x2.reshard(None, &[r]).unwrap_err();
    ensure!(is_arg(&err, "DistTensor::reshard: placements", 1, 2), "{err}");
    let err = x2.transpose(&[1, 0], None, &[r]).unwrap_err();
    ensure!(is_arg(&err, "DistTensor::transpose: placements", 1, 2), "{err}");
    let err = reshard_many(&[&x2, &x2], None, &[&[r, r][..], &[r][..]]).unwrap_err();
    ensure!(is_arg(&err, "reshard_many: placements[1]", 1, 2), "{err}");
    let err = reshard_estimate(&m2, &[r, s0], None, &[r], &[8, 6], DType::F64, false).unwrap_err();
    ensure!(is_arg(&err, "reshard_estimate: dst_placements", 1, 2), "{err}");
    let err = m2.rank_at(&[0]).unwrap_err();
    ensure!(err.status == Status::InvalidArgument
            && err.message.contains("Mesh::rank_at: coord: 1 entries for a mesh of 2 dims"), "{err}");
    let err = ReshardPlan::new(&m1, &[s0], &m2, &[r, r, r], &[8, 6], DType::F64).unwrap_err();
    ensure!(is_arg(&err, "ReshardPlan::new: dst_placements", 3, 2), "{err}");
    let err = ReshardPlan::new(&m1, &[], &m1, &[r], &[8, 6], DType::F64).unwrap_err();
    ensure!(is_arg(&err, "ReshardPlan::new: src_placements", 0, 1), "{err}");
    let err = LocalMap::new().input_as(Arg::Dist(&x), &[]).output(&[r])
        .run(|_, _| Ok(vec![Out::tensor(vec![0.0f64], &[1])?])).unwrap_err();
    ensure!(is_arg(&err, "inputs[0]", 0, 1), "{err}");
    let err = LocalMap::new().mesh(&m2).input(Arg::Int(1)).output(&[r])
        .run(|_, _| Ok(vec![Out::tensor(vec![0.0f64], &[1])?])).unwrap_err();
    ensure!(is_arg(&err, "outputs[0]", 1, 2), "{err}");
    // output_shaped: the closure's tensor must have as many dims as the declared global shape.
    let err = LocalMap::new().input(Arg::Dist(&x)).output_shaped(&[r], &[1])
        .run(|_, _| Ok(vec![Out::tensor(vec![0.0f64; 4], &[2, 2])?])).unwrap_err();
    // (the library reports a failing fn as LM_ERR_USER, with the binding's text)
    ensure!(err.status == Status::User && err.message.contains("outputs[0] is a 2-d tensor"), "{err}");
    // Right lengths still work, and the mesh is usable after the refusals.
    let y = x.reshard(None, &[r]).map_err(e)?;
    ensure!(y.local::<f64>().map_err(e)? == &full[..]);
    Ok(())
}

// Ragged shards: rank r owns r % 3 rows; from_global slices them, a reshard to Replicate
// reassembles them, and the placements read back name the same lengths.
fn ragged(rank: i32, size: i32) -> T {
    let m = Mesh::new(comm_world().map_err(e)?, &[size as i64]).map_err(e)?;
    let rows: Vec<i64> = (0..size as i64).map(|r| r % 3).collect();
    let total: i64 = rows.iter().sum();
    let full: Vec<f64> = (0..total * 2).map(|i| i as f64).collect();
    let x = {
        let ext = Extents::new(&rows).map_err(e)?;
        DistTensor::from_global(&m, Some(&full[..]), &[total, 2], &[ext.placement(0)], -1).map_err(e)?
    };
    let off: i64 = rows[..rank as usize].iter().sum();
    ensure!(x.local_offset().map_err(e)? == vec![off, 0]);
    ensure!(x.local_shape().map_err(e)? == vec![rows[rank as usize], 2]);
    match x.placements().map_err(e)?[0] {
        Placement::Ragged { dim: 0, extents, order: 0 } => ensure!(Extents::lengths(extents).map_err(e)? == rows),
        p => return Err(format!("placement {p:?}")),
    }
    let y = x.reshard(None, &[Placement::Replicate]).map_err(e)?;
    ensure!(y.local::<f64>().map_err(e)? == &full[..]);
    ensure!(Extents::new(&[1, -1]).unwrap_err().status == Status::InvalidArgument);
    // Each rank's own rows, the extents agreed from the local shapes.
    let mine = &full[(off * 2) as usize..((off + rows[rank as usize]) * 2) as usize];
    let z = DistTensor::from_local(&m, mine, &[rows[rank as usize], 2], &[Placement::ragged_agreed(0)],
                                   ShapeMode::Allgather).map_err(e)?;
    ensure!(z.global_shape().map_err(e)? == vec![total, 2]);
    match z.placements().map_err(e)?[0] {
        Placement::Ragged { dim: 0, extents, order: 0 } => ensure!(Extents::lengths(extents).map_err(e)? == rows),
        p => return Err(format!("placement {p:?}")),
    }
    let even = DistTensor::from_local(&m, mine, &[rows[rank as usize], 2], &[Placement::ragged_agreed(0)],
                                      ShapeMode::Even);
    ensure!(even.unwrap_err().status == Status::InvalidArgument);
    Ok(())
}

// Block-cyclic rows (blocks of 2 dealt from the last rank): from_global deals them, the local
// rows follow ScaLAPACK's INDXL2G, a reshard to Replicate reassembles them, placements read back.
fn block_cyclic(rank: i32, size: i32) -> T {
    let m = Mesh::new(comm_world().map_err(e)?, &[size as i64]).map_err(e)?;
    let (n, b, src) = (9i64, 2i64, size - 1);
    let full: Vec<f64> = (0..n * 2).map(|i| i as f64).collect();
    let bc = Placement::BlockCyclic { dim: 0, block: b as i32, src };
    let x = DistTensor::from_global(&m, Some(&full[..]), &[n, 2], &[bc], -1).map_err(e)?;
    let rows: Vec<i64> = (0..n).filter(|i| ((i / b) + src as i64) % size as i64 == rank as i64).collect();
    ensure!(x.local_shape().map_err(e)? == vec![rows.len() as i64, 2]);
    let want: Vec<f64> = rows.iter().flat_map(|i| [(2 * i) as f64, (2 * i + 1) as f64]).collect();
    ensure!(x.local::<f64>().map_err(e)? == &want[..]);
    ensure!(x.placements().map_err(e)?[0] == bc);
    let y = x.reshard(None, &[Placement::Replicate]).map_err(e)?;
    ensure!(y.local::<f64>().map_err(e)? == &full[..]);
    let bad = DistTensor::from_global(&m, Some(&full[..]), &[n, 2],
                                      &[Placement::BlockCyclic { dim: 0, block: 0, src: 0 }], -1);
    ensure!(bad.unwrap_err().status == Status::InvalidArgument);
    // A ScaLAPACK local array (3 x 9 matrix, blocks of 2 columns from the last process column of
    // a 1 x size grid, LLD 3): the tensor [9, 3] holds A(i, j) = 3 j + i at [j, i].
    let grid = Mesh::grid(comm_world().map_err(e)?, 0, rank).map_err(e)?;
    ensure!(grid.shape().map_err(e)? == vec![1, size as i64] && grid.coord().map_err(e)? == vec![0, rank as i64]);
    let cols: Vec<i64> = (0..n).filter(|j| ((j / b) + src as i64) % size as i64 == rank as i64).collect();
    let arr: Vec<f64> = cols.iter().flat_map(|j| (0..3).map(move |i| (3 * j + i) as f64)).collect();
    let desc = [1, 0, 3, n as i32, 3, b as i32, 0, src, 3];
    let s = DistTensor::from_scalapack(&grid, &desc, &arr[..]).map_err(e)?;
    ensure!(s.to_scalapack(0).map_err(e)? == desc);
    let all: Vec<f64> = (0..n * 3).map(|i| i as f64).collect();
    ensure!(s.reshard(None, &[Placement::Replicate, Placement::Replicate]).map_err(e)?.local::<f64>().map_err(e)? == &all[..]);
    ensure!(s.local_extents().map_err(e)? == s.local_shape().map_err(e)?);
    // The same matrix borrowed from an array with LLD 5 > 3: the shard's rows lie padded in it.
    let arr5: Vec<f64> =
        cols.iter().flat_map(|j| (0..5).map(move |i| if i < 3 { (3 * j + i) as f64 } else { -7.0 })).collect();
    let desc5 = [1, 0, 3, n as i32, 3, b as i32, 0, src, 5];
    // SAFETY: arr5 holds the LLD 5 x LOCc array desc5 describes and outlives the tensor.
    let p = unsafe {
        DistTensor::from_scalapack_raw(&grid, &desc5, arr5.as_ptr() as *mut std::ffi::c_void, DType::F64,
                                       Device::Cpu, sys::LM_FROM_LOCAL_BORROW)
    }.map_err(e)?;
    let padded = if cols.len() > 1 { 5 } else { 3 }; // one column: nothing to pad
    ensure!(p.local_extents().map_err(e)? == vec![cols.len() as i64, padded]);
    ensure!(p.reshard(None, &[Placement::Replicate, Placement::Replicate]).map_err(e)?.local::<f64>().map_err(e)? == &all[..]);
    drop(p);
    if !cols.is_empty() {
        let short = DistTensor::from_scalapack(&grid, &desc, &arr[..arr.len() - 1]);
        ensure!(short.unwrap_err().status == Status::InvalidArgument);
    }
    Ok(())
}

/// Errors speak Rust (issue 40): the Rust method, slice, type and `Placement` field names, never
/// a C function, argument or extents id; a wrong slice length is refused before any C call.
fn rust_words(rank: i32, size: i32) -> T {
    let m2 = Mesh::new(comm_world().map_err(e)?, &[1, size as i64]).map_err(e)?; // 2-D
    let m1 = Mesh::new(comm_world().map_err(e)?, &[size as i64]).map_err(e)?; // 1-D
    let (r, s0) = (Placement::Replicate, Placement::Shard(0));
    let full: Vec<f64> = (0..12).map(f64::from).collect();
    let rust = |err: &Error, want: &str| {
        err.status == Status::InvalidArgument && err.message.contains(want) && !err.message.contains("lm_")
            && !err.message.contains("extents id") && err.to_string().starts_with("InvalidArgument: ")
    };
    // A short slice: refused in Rust's terms, and before C (whose last message stays the one before).
    let x = DistTensor::from_global(&m2, Some(&full[..]), &[6, 2], &[r, s0], -1).map_err(e)?;
    let before = chunk(1, 0, 0).unwrap_err();
    let err = x.reshard(None, &[r]).unwrap_err();
    ensure!(rust(&err, "DistTensor::reshard: placements: 1 placements for a mesh of 2 dims (one Placement per \
                        mesh dim)"), "{err}");
    ensure!(last_error_message() == before.message.replace("chunk", "lm_layout_chunk"), "{}", last_error_message());
    let err = x.transpose(&[0], None, &[r, r]).unwrap_err();
    ensure!(rust(&err, "DistTensor::transpose: perm: 1 entries for a tensor of 2 dims"), "{err}");
    let err = x.transpose_into(&mut x.clone(), &[0, 1, 2]).unwrap_err();
    ensure!(rust(&err, "DistTensor::transpose_into: perm: 3 entries for a tensor of 2 dims"), "{err}");
    let err = DistTensor::zeros(&m1, &[4], DType::F64, Device::Cpu, &[r, r]).unwrap_err();
    ensure!(rust(&err, "DistTensor::zeros: placements: 2 placements for a mesh of 1 dims"), "{err}");
    // A Placement::BlockCyclic field the library refuses: named as the enum variant's field.
    let bc = |block, src| [Placement::BlockCyclic { dim: 0, block, src }];
    let err = DistTensor::from_global(&m1, Some(&full[..]), &[12], &bc(0, 0), -1).unwrap_err();
    ensure!(rust(&err, "DistTensor::from_global: placements[0]: Placement::BlockCyclic block 0 must be >= 1"), "{err}");
    let err = DistTensor::from_global(&m1, Some(&full[..]), &[12], &bc(2, -1), -1).unwrap_err();
    ensure!(rust(&err, "placements[0]: Placement::BlockCyclic src -1 must be >= 0"), "{err}");
    let err = DistTensor::zeros(&m1, &[12], DType::F64, Device::Cpu, &[Placement::ShardOrdered { dim: 0, order: -1 }])
        .unwrap_err();
    ensure!(rust(&err, "DistTensor::zeros: placements[0]: Placement::ShardOrdered order -1"), "{err}");
    // A ragged placement's extents: named by their lengths (rank r holds 1 + r rows of 12 + 1).
    let lengths: Vec<i64> = (0..size as i64).map(|r| 1 + r).collect();
    let ext = Extents::new(&lengths).map_err(e)?;
    let err = DistTensor::zeros(&m1, &[13], DType::F64, Device::Cpu, &[ext.placement(0)]).unwrap_err();
    let sum: i64 = lengths.iter().sum();
    ensure!(rust(&err, &format!("DistTensor::zeros: placements[0]: Placement::Ragged extents {lengths:?} add up to \
                                {sum}, tensor dim 0 has 13")), "{err}");
    let err = DistTensor::zeros(&m1, &[13], DType::F64, Device::Cpu, &[Placement::Ragged { dim: 0, extents: 9999,
                                                                                          order: 0 }]).unwrap_err();
    ensure!(rust(&err, "Placement::Ragged extents 9999 is not registered (Extents::new"), "{err}");
    let err = Extents::lengths(9999).unwrap_err();
    ensure!(rust(&err, "Extents::lengths: id 9999 is the id of no live Extents"), "{err}");
    let err = DistTensor::zeros(&m1, &[13], DType::F64, Device::Cpu, &[Placement::ragged_agreed(0)]).unwrap_err();
    ensure!(rust(&err, "Placement::ragged_agreed needs the ranks' local shapes: DistTensor::from_local with \
                        ShapeMode::Allgather"), "{err}");
    // LocalMap: the builder's words, not lm_local_map's arguments.
    let err = LocalMap::new().input(Arg::Dist(&x)).output(&[r, Placement::Ragged { dim: 0, extents: 9999, order: 0 }])
        .run(|_, _| Ok(vec![Out::tensor(vec![0.0f64], &[1])?])).unwrap_err();
    ensure!(rust(&err, "LocalMap::run: output placements[0][1]: Placement::Ragged extents 9999"), "{err}");
    let err = Mesh::with_names(comm_world().map_err(e)?, &[size as i64], &[""]).unwrap_err();
    ensure!(rust(&err, "Mesh::with_options: names[0] is NULL or empty"), "{err}");
    // A failure on another rank names the failing rank and this crate's method.
    if size > 1 {
        let bad = if rank == 0 { vec![Placement::Shard(5), r] } else { vec![r, r] };
        let err = x.reshard(None, &bad).unwrap_err();
        let want = "DistTensor::reshard: placements[0]: Placement::Shard dim 5";
        let remote = format!("DistTensor::reshard: rank 0 (mesh rank 0) failed: InvalidArgument: {want}");
        ensure!(err.message.contains(if rank == 0 { want } else { &remote }), "{err}");
        ensure!(!err.message.contains("lm_") && !err.message.contains("LM_ERR"), "{err}");
    }
    Ok(())
}

fn main() {
    init().expect("lm_init");
    let (rank, size) = world_rank().expect("lm_world_rank");
    let tests: [(&str, fn(i32, i32) -> T); 12] = [
        ("ragged", ragged),
        ("block_cyclic", block_cyclic),
        ("statics", |_, _| statics()),
        ("mesh_queries", mesh_queries),
        ("tensors", tensors),
        ("plans", plans),
        ("estimates", estimates),
        ("groups", groups),
        ("local_maps", local_maps),
        ("local_map_records", local_map_records),
        ("slice_lengths", slice_lengths),
        ("rust_words", rust_words),
    ];
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        // The deliberate panic of local_maps is expected; report anything else.
        if !info.to_string().contains("boom on rank") {
            hook(info);
        }
    }));
    for (name, t) in tests {
        match t(rank, size) {
            Ok(()) => {
                if rank == 0 {
                    println!("ok {name} (np {size})");
                }
            }
            Err(msg) => {
                eprintln!("FAIL {name} on rank {rank} of {size}: {msg}");
                std::process::exit(1);
            }
        }
    }
    finalize().expect("lm_finalize");
    if rank == 0 {
        println!("rust tests: all passed at np {size}");
    }
}
