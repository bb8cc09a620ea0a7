#!/bin/sh
# the sweep, then each engine's all-reduce over each of its shaped links
set -e
cd "$(dirname "$0")"
PATH=$(git rev-parse --show-toplevel)/.venv/bin:$PATH
dlperf sweep link-rates-window.yaml --emulate-hosts --db lr-window.db
for framework in torch oneflow; do
  for link in 10gbit 1gbit 500mbit 250mbit; do
    dlperf collectives --framework $framework --emulate-hosts 2 --nproc 1 --link $link --ops allreduce \
      --sizes 1M:32M --iters 5 --warmup 1 --threads-per-process 1 --db lr-window.db
  done
done
