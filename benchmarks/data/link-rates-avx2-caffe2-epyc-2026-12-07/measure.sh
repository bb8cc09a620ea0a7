#!/bin/sh
# Caffe2's one-host sweep (../one-host-caffe2-avx2-epyc-2026-12-07/) and its all-reduce,
# all-gather and broadcast on 2 processes of this host; then its emulated-hosts sweep and its
# all-reduce over each shaped link:   ./measure.sh DB   (from this folder, as root, alone)
set -e
cd "$(dirname "$0")"
PATH=$(git rev-parse --show-toplevel)/.venv/bin:$PATH
db=$1
dlperf sweep ../one-host-caffe2-avx2-epyc-2026-12-07/projection-one-host-caffe2.yaml --db "$db"
dlperf collectives --framework caffe2 --nproc 2 --ops allreduce,allgather,broadcast \
  --sizes 1M:32M --iters 20 --warmup 1 --threads-per-process 1 --db "$db"
dlperf sweep link-rates-avx2-caffe2.yaml --emulate-hosts --db "$db"
for link in 1200mbit 600mbit; do
  dlperf collectives --framework caffe2 --emulate-hosts 2 --nproc 1 --link $link --ops allreduce \
    --sizes 1M:128M --iters 20 --warmup 1 --threads-per-process 1 --db "$db"
done
