#!/bin/sh
# A link-rate sweep, then each named engine's all-reduce over each of its shaped links:
#   ./measure.sh SWEEP.yaml DB FRAMEWORK...   (run from the sweep's folder, as root, alone)
# e.g. ./measure.sh link-rates-window.yaml lr-window.db torch oneflow
# LINKS (the sweep's shaped rates), SIZES (the all-reduce's) and ITERS (its calls a size) default to
# this folder's run's.
set -e
here=$(cd "$(dirname "$0")" && pwd)
PATH=$(cd "$here" && git rev-parse --show-toplevel)/.venv/bin:$PATH
sweep=$1 db=$2; shift 2
LINKS=${LINKS:-10gbit 1gbit 500mbit 250mbit} SIZES=${SIZES:-1M:32M}
dlperf sweep "$sweep" --emulate-hosts --db "$db"
for framework in "$@"; do
  for link in $LINKS; do
    dlperf collectives --framework "$framework" --emulate-hosts 2 --nproc 1 --link $link --ops allreduce \
      --sizes "$SIZES" --iters "${ITERS:-5}" --warmup 1 --threads-per-process 1 --db "$db"
  done
done
