#!/bin/sh
# OneFlow's all-reduce call to call over shaped links, 20 calls a size (torch's gloo beside it)
set -e
here=$(cd "$(dirname "$0")" && pwd)
PATH=$(cd "$here" && git rev-parse --show-toplevel)/.venv/bin:$PATH
cd "$(git rev-parse --show-toplevel)"
for spec in "oneflow 400mbit" "torch 400mbit" "oneflow 1500mbit"; do
  set -- $spec
  dlperf collectives --framework $1 --emulate-hosts 2 --nproc 1 --link $2 --ops allreduce \
    --sizes 64M:128M --iters 20 --warmup 1 --threads-per-process 1 --db "$here/calls.db"
done
