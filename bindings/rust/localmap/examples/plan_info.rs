// SPDX-License-Identifier: BSD-3-Clause
//! Reshard plans: what one moves (`ReshardPlan::info`) and its adjoint, the backward plan
//! (`ReshardPlan::adjoint`), for a 10 x 3 f64 tensor on a 1-D mesh of all ranks:
//!
//!   all-gather      S(0) -> R        adjoint: R -> S(0), a slice (nothing moves)
//!   reduce-scatter  P(sum) -> S(0)   adjoint: S(0) -> R, an all-gather
//!
//! For each plan it prints this rank's bytes, steps and routes and every rank's sum
//! (`info(true)`, collective), and checks both against the bytes computed here from torch.chunk's
//! blocks: rank r holds c_r rows of 24 bytes; an all-gather sends c_r rows to each of the np - 1
//! others and receives the N - c_r rows it lacks; a reduce-scatter the converse. Summed over the
//! ranks both are (np - 1) N rows. It checks that the adjoint goes the other way (its target
//! placements are the adjoint of the forward source's), then runs both plans and checks every
//! element against the formulas that filled the data.
//!
//!   tools/lm-mpirun 4 build/rust-target/debug/examples/plan_info    (np 2 and 4 in make check)
use localmap::{format_placements, placements_adjoint, sys, DType, Device, DistTensor, Mesh, Placement, ReduceOp, ReshardPlan};

const N: i64 = 10; // rows
const M: i64 = 3; // columns
const ROW_BYTES: i64 = M * 8; // f64

/// Rows [lo, hi) of block `i` of `parts` of n rows, as torch.chunk splits them.
fn chunk(n: i64, parts: i64, i: i64) -> (i64, i64) {
    let b = (n + parts - 1) / parts;
    ((i * b).min(n), ((i + 1) * b).min(n))
}

fn routes(bits: u32) -> String {
    let names = [(sys::LM_ROUTE_MPI, "mpi"), (sys::LM_ROUTE_NODE_LOCAL, "node_local"), (sys::LM_ROUTE_BOARD, "board")];
    let r: Vec<&str> = names.iter().filter(|(b, _)| bits & b != 0).map(|(_, n)| *n).collect();
    if r.is_empty() { "none".into() } else { r.join("+") }
}

/// Prints the plan's info for this rank and for all ranks; checks the bytes. Returns failures.
fn show(rank: i32, what: &str, plan: &ReshardPlan, sent: i64, received: i64, total: i64)
        -> Result<u32, localmap::Error> {
    let (me, all) = (plan.info(false)?, plan.info(true)?);
    println!("rank {rank}: {what}: sends {} B, receives {} B, {} step(s), routes {} | all ranks: {} B sent, {} B received",
             me.bytes_sent, me.bytes_received, me.steps, routes(me.routes), all.bytes_sent, all.bytes_received);
    let ok = me.bytes_sent == sent && me.bytes_received == received
        && all.bytes_sent == total && all.bytes_received == total;
    if !ok {
        println!("rank {rank}: {what}: expected {sent} B sent, {received} B received, {total} B over all ranks");
    }
    Ok(!ok as u32)
}

/// Failures among the elements of x's shard: it must hold rows [lo, hi), all columns, of f.
fn wrong(x: &DistTensor, (lo, hi): (i64, i64), f: impl Fn(i64, i64) -> f64) -> Result<u32, localmap::Error> {
    let (off, a) = (x.local_offset()?, x.local::<f64>()?);
    let mut bad = (off[0] != lo || a.len() as i64 != (hi - lo) * M) as u32;
    for (k, v) in a.iter().enumerate().take(((hi - lo) * M).max(0) as usize) {
        bad += (*v != f(lo + k as i64 / M, k as i64 % M)) as u32;
    }
    Ok(bad)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    localmap::init()?;
    let (rank, np) = localmap::world_rank()?;
    let (r, p) = (rank as i64, np as i64);
    let mesh = Mesh::new(localmap::comm_world()?, &[p])?;
    let x = |i: i64, j: i64| (10 * i + j) as f64; // the forward value
    let g = |i: i64, j: i64| (i - 2 * j) as f64 + 0.5; // the gradient
    let full_x: Vec<f64> = (0..N * M).map(|k| x(k / M, k % M)).collect();
    let full_g: Vec<f64> = (0..N * M).map(|k| g(k / M, k % M)).collect();
    let mine = chunk(N, p, r);
    let c = mine.1 - mine.0; // this rank's rows under S(0)
    let total = (p - 1) * N * ROW_BYTES;
    use Placement::{Partial, Replicate, Shard};
    let cases = [("all-gather [S(0)] -> [R]", Shard(0), Replicate, (p - 1) * c, N - c),
                 ("reduce-scatter [P(sum)] -> [S(0)]", Partial(ReduceOp::Sum), Shard(0), N - c, (p - 1) * c)];
    let mut bad = 0;
    for (what, src, dst, sent_rows, recv_rows) in cases {
        let plan = ReshardPlan::new(&mesh, &[src], &mesh, &[dst], &[N, M], DType::F64)?;
        bad += show(rank, what, &plan, sent_rows * ROW_BYTES, recv_rows * ROW_BYTES, total)?;
        // Forward: from_global puts the full value in the source layout (a Partial source: rank 0
        // holds it, the others zeros), so the target holds rows of x.
        let src_x = DistTensor::from_global(&mesh, Some(&full_x[..]), &[N, M], &[src], -1)?;
        let mut y = plan.alloc_target(Device::Cpu)?;
        plan.execute(&src_x, &mut y)?;
        bad += wrong(&y, if dst == Replicate { (0, N) } else { mine }, x)?;

        // Backward: gradients laid out as the adjoint of dst, to the adjoint of src.
        let adj = plan.adjoint()?;
        let (gsrc, gdst) = (placements_adjoint(&[dst])?, placements_adjoint(&[src])?);
        let mut dx = adj.alloc_target(Device::Cpu)?;
        if dx.placements()? != gdst {
            println!("rank {rank}: adjoint of {what}: target {:?}, expected {gdst:?}", dx.placements()?);
            bad += 1;
        }
        let (adj_sent, adj_recv, adj_total) = if gdst[0] == Replicate {
            ((p - 1) * c * ROW_BYTES, (N - c) * ROW_BYTES, total) // an all-gather
        } else {
            (0, 0, 0) // a slice: each rank keeps its rows
        };
        let name = format!("  adjoint {} -> {}", format_placements(&gsrc)?, format_placements(&gdst)?);
        bad += show(rank, &name, &adj, adj_sent, adj_recv, adj_total)?;
        let dy = DistTensor::from_global(&mesh, Some(&full_g[..]), &[N, M], &gsrc, -1)?;
        adj.execute(&dy, &mut dx)?;
        bad += wrong(&dx, if gdst[0] == Replicate { (0, N) } else { mine }, g)?;
    }
    println!("rank {rank}: plan info and adjoints: {}", if bad == 0 { "PASS" } else { "FAIL" });
    drop(mesh);
    localmap::finalize()?;
    if bad != 0 {
        std::process::exit(1);
    }
    Ok(())
}
