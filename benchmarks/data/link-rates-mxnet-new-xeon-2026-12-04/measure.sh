#!/bin/sh
# the sweep, then MXNet's push and pull over each of its links
set -e
cd "$(dirname "$0")"
PATH=$(git rev-parse --show-toplevel)/.venv/bin:$PATH
dlperf sweep link-rates-mxnet-new.yaml --emulate-hosts --db lr-new.db
for link in none 5gbit 2500mbit 500mbit 200mbit; do
  if [ $link = none ]; then l=""; else l="--link $link"; fi
  dlperf collectives --framework mxnet --path kvstore --emulate-hosts 2 --nproc 1 $l --ops pushpull \
    --sizes 1M:32M --iters 5 --warmup 1 --threads-per-process 1 --db lr-new.db
done
