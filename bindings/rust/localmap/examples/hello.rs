// SPDX-License-Identifier: BSD-3-Clause
//! The first program of README.md's Rust section: shard 10 values over all ranks, gather them.
//!   tools/lm-mpirun 3 build/rust-target/debug/examples/hello
use localmap::{DistTensor, Mesh, Placement};

fn main() -> Result<(), localmap::Error> {
    localmap::init()?;
    let (rank, size) = localmap::world_rank()?;
    let mesh = Mesh::new(localmap::comm_world()?, &[size as i64])?; // a 1-D mesh of all ranks
    let full: Vec<f64> = (0..10).map(f64::from).collect();
    let x = DistTensor::from_global(&mesh, Some(&full[..]), &[10], &[Placement::Shard(0)], -1)?;
    let (off, mine) = (x.local_offset()?[0], x.local::<f64>()?);
    let all = x.gather_all::<f64>()?; // the full tensor on every rank
    println!("rank {rank} holds [{off}, {}){}", off + mine.len() as i64,
             if all == full { ", gathered all 10" } else { ", gather FAILED" });
    drop((x, mesh));
    localmap::finalize()
}
