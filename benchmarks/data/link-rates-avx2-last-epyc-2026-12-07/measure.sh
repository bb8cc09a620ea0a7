#!/bin/sh
# The sweep, then TensorFlow 1.15's and MindSpore's all-reduce and MXNet's push and pull over
# each shaped link (MXNet's unshaped too, as ../link-rates-mxnet-new-xeon-2026-12-04/ measured):
#   ./measure.sh DB   (from this folder, as root, alone)
set -e
cd "$(dirname "$0")"
PATH=$(git rev-parse --show-toplevel)/.venv/bin:$PATH
db=$1
dlperf sweep link-rates-avx2-last.yaml --emulate-hosts --db "$db"
for framework in tensorflow1 mindspore; do
  for link in 1200mbit 600mbit; do
    dlperf collectives --framework $framework --emulate-hosts 2 --nproc 1 --link $link --ops allreduce \
      --sizes 1M:128M --iters 20 --warmup 1 --threads-per-process 1 --db "$db"
  done
done
for link in none 1200mbit 600mbit; do
  if [ $link = none ]; then l=""; else l="--link $link"; fi
  dlperf collectives --framework mxnet --path kvstore --emulate-hosts 2 --nproc 1 $l --ops pushpull \
    --sizes 1M:32M --iters 5 --warmup 1 --threads-per-process 1 --db "$db"
done
