# SPDX-License-Identifier: BSD-3-Clause
"""The masked loss of examples/demo.c (part 2), in Python: the same inputs, the same computation,
the same printed number.

    tools/lm-mpirun 4 python3 bindings/python/examples/masked_loss.py

Mesh dp x tp named {"dp", "tp"} (tp = 2 when the world size is even and at least 4). predictions
[11, 5] are sharded on the batch dim over dp; labels start replicated and local_map reshards them
to the batch layout. fn returns this rank's loss sum and token count as Partial(sum) over dp;
resharding to Replicate sums them, and loss_sum / count is exactly the serial loss. Labels equal
to -100 are ignored. Every rank checks the result against a serial reference; the program prints
PASS or FAIL (rank 0) and exits nonzero on a mismatch. It does not import mpi4py: localmap
initialises and finalises MPI itself.
"""
import sys

import numpy as np

import localmap as lm

B, C, IGNORE = 11, 5, -100


def row_loss(pred, label):
    onehot = np.zeros(C)
    onehot[label] = 1.0
    return float(((pred - onehot) ** 2).sum())


def main():
    rank, size = lm.world_rank()
    tp = 2 if size % 2 == 0 and size >= 4 else 1
    mesh = lm.Mesh([size // tp, tp], dim_names=["dp", "tp"])

    i, c = np.arange(B)[:, None], np.arange(C)[None, :]
    pred_full = ((i * 7 + c * 3) % 11) / 4.0 - 1.0
    lab_full = np.where(np.arange(B) % 4 == 3, IGNORE, (np.arange(B) * 3) % C).astype(np.int64)

    batch = [lm.Shard(0), lm.Replicate()]
    rep = [lm.Replicate(), lm.Replicate()]
    partial = [lm.Partial("sum"), lm.Replicate()]
    pred = lm.from_global(pred_full, mesh, batch)
    labels = lm.from_global(lab_full, mesh, rep)

    @lm.local_map(out_placements=(partial, partial), in_placements=(batch, batch),
                  reshard_inputs=True)
    def masked_loss(p, lab):
        if p.shape[0] != lab.shape[0]:
            raise ValueError("predictions and labels have different local batch sizes")
        keep = lab != IGNORE
        loss_sum = sum(row_loss(p[k], lab[k]) for k in np.flatnonzero(keep))
        return np.array([loss_sum]), np.array([float(keep.sum())])

    loss_sum, count = masked_loss(pred, labels)
    total = loss_sum.reshard(rep).local()[0]
    n = count.reshard(rep).local()[0]
    loss = total / n

    keep = lab_full != IGNORE
    ref_n = float(keep.sum())
    ref = sum(row_loss(pred_full[k], lab_full[k]) for k in np.flatnonzero(keep)) / ref_n
    ok = n == ref_n and abs(loss - ref) <= 1e-12 * ref
    if rank == 0:
        print(f"  loss = {loss:.12f} over {n:g} tokens (serial: {ref:.12f} over {ref_n:g})")
        print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
