#!/usr/bin/env bash
# Diagnostic for issue 56: is torch's 2-process excess on one host contention (two independent
# copies, no communication, each on its own core) or communication? Interleaved, fresh processes.
set -u
D=/work/main/benchmarks/data/contention-2026-12-01; mkdir -p $D
DL=/work/main/.venv/bin/dlperf
COMMON="--model resnet50 --image-size 32 --warmup-steps 2 --steps 6 --min-duration 4 --repeats 1 --threads-per-process 1 --db $D/c.db"
for rep in 1 2 3; do
 for fw in torch; do
  for bs in 8 16; do
   $DL run --framework $fw $COMMON --batch-size $bs --json $D/$fw-$bs-1p-$rep.json >/dev/null 2>&1
   $DL run --framework $fw $COMMON --batch-size $bs --devices 2 --json $D/$fw-$bs-2p-$rep.json >/dev/null 2>&1
   taskset -c 0 $DL run --framework $fw $COMMON --batch-size $bs --json $D/$fw-$bs-ia-$rep.json >/dev/null 2>&1 &
   taskset -c 1 $DL run --framework $fw $COMMON --batch-size $bs --json $D/$fw-$bs-ib-$rep.json >/dev/null 2>&1 &
   wait
  done
 done
done
