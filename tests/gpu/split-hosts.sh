#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs one MPI rank as if it were alone on its own host, as far as NCCL can tell: its own
# NCCL_HOSTID (so NCCL does not see two ranks of one communicator on one GPU as "Duplicate GPU")
# and the loopback interface for NCCL's socket transport. With this, several ranks on the ONE GPU
# of a device machine run real NCCL (make check-gpu NCCL_SPLIT_HOSTS=1).
# Usage (under mpirun): tests/gpu/split-hosts.sh PROGRAM [ARGS...]
set -eu
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-0}}}
export NCCL_HOSTID="lm-split-host-$rank"
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
# P2P/SHM between "hosts" would be wrong: force the network (socket) path.
export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1
exec "$@"
