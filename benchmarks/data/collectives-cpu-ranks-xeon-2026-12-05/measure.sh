#!/bin/bash
# How the CPU of an all-reduce grows with the ring: torch's gloo and TensorFlow's gRPC ring on
# 2 emulated hosts of 1 and of 2 processes (unshaped links, each host on one CPU), one thread a
# process, 16-64 MiB, the CPU of each call taken (the busiest rank's). As root, alone:
#   ../../../../shared/bin/quiet -- ./measure.sh
COMMON="--emulate-hosts 2 --threads-per-process 1 --ops allreduce --sizes 16M:64M --iters 5 --warmup 1 --timeout 600 --db coll.db"
for fw in torch tensorflow; do
  for n in 1 2; do
    dlperf collectives --framework $fw $COMMON --nproc $n > $fw-2x$n.log 2>&1
    echo "$fw 2x$n rc=$?"
  done
done
