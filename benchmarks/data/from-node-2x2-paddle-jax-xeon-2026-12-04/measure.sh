#!/bin/bash
# The whole step from a node of 2 processes to 2 emulated hosts of 2: per framework, its 1 node of
# 2 processes on one CPU (as each emulated host has one), then 2 emulated hosts of 2 processes
# unshaped and over 10 Gbit/s, 1 Gbit/s and 100 Mbit/s links, then its collective over each link.
# As root (emulated hosts), alone: ../../../../shared/bin/quiet -- ./measure.sh torch mxnet tensorflow
CASE="--model resnet50 --image-size 64 --batch-size 8 --threads-per-process 1 --warmup-steps 2
      --steps 4 --repeats 3 --timeout 300 --devices 2 --db fn.db"
for fw in "$@"; do
  op=allreduce; [ "$fw" = mxnet ] && op=pushpull
  taskset -c 0 dlperf run --framework $fw $CASE > $fw-start.log 2>&1; echo "$fw start rc=$?"
  dlperf run --framework $fw $CASE --emulate-hosts 2 > $fw-none.log 2>&1; echo "$fw none rc=$?"
  for link in 10gbit 1gbit 100mbit; do
    dlperf run --framework $fw $CASE --emulate-hosts 2 --link $link > $fw-$link.log 2>&1
    echo "$fw $link rc=$?"
  done
  for link in 10gbit 1gbit 100mbit; do
    dlperf collectives --framework $fw --emulate-hosts 2 --nproc 2 --link $link --ops $op \
        --sizes 1M:32M --iters 5 --warmup 1 --threads-per-process 1 --db fn.db \
        > $fw-collectives-$link.log 2>&1
    echo "$fw collectives $link rc=$?"
  done
done
