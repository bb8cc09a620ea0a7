#!/bin/bash
# Every CPU collective path's all-reduce (MXNet's push and pull) on 1 node of 2 processes, one
# thread a process, with each call's CPU time (the busiest rank's, the whole process's); one
# `dlperf collectives --json` file a path. As root, alone:
#   ../../../../shared/bin/quiet -- ./measure.sh
COMMON="--nproc 2 --threads-per-process 1 --sizes 1M:64M --iters 5 --warmup 1 --timeout 600 --db coll.db"
for spec in "torch gloo allreduce" "torch horovod allreduce" "torch horovod-mpi allreduce" \
        "tensorflow ring allreduce" "tensorflow1 ring allreduce" \
        "tensorflow1 horovod allreduce" "tensorflow1 horovod-mpi allreduce" \
        "jax gloo allreduce" "paddle gloo allreduce" "oneflow cpu allreduce" \
        "mindspore mccl allreduce" "mxnet kvstore pushpull" "mxnet horovod allreduce" \
        "mxnet horovod-mpi allreduce"; do
  set -- $spec; fw=$1; path=$2; op=$3
  dlperf collectives --framework $fw --path $path --ops $op $COMMON \
      --json $fw-$path.json > $fw-$path.log 2>&1
  echo "$fw $path rc=$?"
done
