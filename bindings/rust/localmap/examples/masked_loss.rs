// SPDX-License-Identifier: BSD-3-Clause
//! The masked loss of examples/demo.c (part 2) in Rust, on the same inputs; it prints the same
//! `loss = ...` line as the C demo.
//!
//!   tools/lm-mpirun 4 build/rust-target/debug/examples/masked_loss
//!
//! predictions [11, 5] and labels [11] on a {dp, tp} mesh (tp = 2 when the world size is even
//! and at least 4), batch-sharded over dp. Labels of -100 are ignored. The closure returns this
//! rank's loss sum and token count as Partial(sum) over dp; resharding to Replicate sums them.
use localmap::{Arg, DistTensor, LocalMap, Mesh, Out, Placement, ReduceOp};

const B: usize = 11;
const C: usize = 5;
const IGNORE: i64 = -100;

fn row_loss(pred: &[f64], label: i64) -> f64 {
    (0..C).map(|c| pred[c] - if c as i64 == label { 1.0 } else { 0.0 }).map(|d| d * d).sum()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    localmap::init()?;
    let (rank, size) = localmap::world_rank()?;
    let tp = if size % 2 == 0 && size >= 4 { 2 } else { 1 };
    let mesh = Mesh::with_names(localmap::comm_world()?, &[(size / tp) as i64, tp as i64], &["dp", "tp"])?;

    let pred_full: Vec<f64> = (0..B * C).map(|k| ((k / C * 7 + k % C * 3) % 11) as f64 / 4.0 - 1.0).collect();
    let labels_full: Vec<i64> = (0..B).map(|i| if i % 4 == 3 { IGNORE } else { (i * 3 % C) as i64 }).collect();

    use Placement::{Partial, Replicate, Shard};
    let batch = [Shard(0), Replicate];
    let rep = [Replicate, Replicate];
    let partial = [Partial(ReduceOp::Sum), Replicate];
    let pred = DistTensor::from_global(&mesh, Some(&pred_full[..]), &[B as i64, C as i64], &batch, -1)?;
    let labels = DistTensor::from_global(&mesh, Some(&labels_full[..]), &[B as i64], &rep, -1)?;

    let outs = LocalMap::new()
        .input_as(Arg::Dist(&pred), &batch)
        .input_as(Arg::Dist(&labels), &batch) // resharded from Replicate
        .output(&partial)
        .output(&partial)
        .reshard_inputs()
        .run(|_ctx, inp| {
            let (p, l) = (inp[0].tensor()?.data::<f64>()?, inp[1].tensor()?.data::<i64>()?);
            let (mut sum, mut count) = (0.0, 0.0);
            for (row, &label) in p.chunks(C).zip(l) {
                if label != IGNORE {
                    sum += row_loss(row, label);
                    count += 1.0;
                }
            }
            Ok(vec![Out::tensor(vec![sum], &[1])?, Out::tensor(vec![count], &[1])?])
        })?;
    let mut outs = outs.into_iter();
    let (sum, count) = (outs.next().unwrap().into_dist()?, outs.next().unwrap().into_dist()?);
    let total = sum.reshard(None, &rep)?.local::<f64>()?[0];
    let n = count.reshard(None, &rep)?.local::<f64>()?[0];
    let loss = total / n;

    let (mut ref_sum, mut ref_n) = (0.0, 0.0);
    for (i, &label) in labels_full.iter().enumerate() {
        if label != IGNORE {
            ref_sum += row_loss(&pred_full[i * C..(i + 1) * C], label);
            ref_n += 1.0;
        }
    }
    let reference = ref_sum / ref_n;
    let ok = n == ref_n && (loss - reference).abs() <= 1e-12 * reference;
    if rank == 0 {
        println!("masked loss (rust), mesh {} x {tp} {{dp, tp}} over {size} ranks", size / tp);
        println!("  loss = {loss:.12} over {n} tokens (serial: {reference:.12} over {ref_n})");
        println!("{}", if ok { "PASS" } else { "FAIL" });
    }
    drop((pred, labels, sum, count, mesh));
    localmap::finalize()?;
    if ok { Ok(()) } else { Err("the loss differs from the serial reference".into()) }
}
