#!/bin/bash
# Each engine's all-reduce (MXNet's push and pull) on 1 node of 2 processes, then on 2 emulated
# hosts of 1 and of 2 processes over 1 Gbit/s links; one `dlperf collectives --json` file a run.
# As root (emulated hosts), alone: ../../../../shared/bin/quiet -- ./measure.sh
COMMON="--sizes 1M:16M --iters 5 --warmup 1 --threads-per-process 1 --timeout 600 --db ar.db"
for spec in "torch gloo allreduce" "torch horovod allreduce" "tensorflow ring allreduce" \
        "tensorflow1 ring allreduce" "jax gloo allreduce" "paddle gloo allreduce" \
        "oneflow cpu allreduce" "mindspore mccl allreduce" "mxnet kvstore pushpull"; do
  set -- $spec; fw=$1; path=$2; op=$3
  dlperf collectives --framework $fw --path $path --ops $op --nproc 2 $COMMON \
      --json $fw-$path-1x2.json > $fw-$path-1x2.log 2>&1; echo "$fw $path 1x2 rc=$?"
  for n in 1 2; do
    dlperf collectives --framework $fw --path $path --ops $op --emulate-hosts 2 --nproc $n \
        --link 1gbit $COMMON --json $fw-$path-2x$n-1gbit.json > $fw-$path-2x$n-1gbit.log 2>&1
    echo "$fw $path 2x$n rc=$?"
  done
done
