#!/usr/bin/env bash
# Run a command inside a throw-away Slurm cluster on this one host, then stop the cluster.
#
#   scripts/slurm-one-host.sh salloc -N 2 .venv/bin/dlperf sweep FILE   # a sweep across 2 "nodes"
#   scripts/slurm-one-host.sh                                           # start it; Ctrl-C stops it
#
# The cluster is the one the tests use (tests/slurm_cluster.py): munged, slurmctld and two slurmd
# daemons serving node names n1 and n2 on this host, configured in a fresh directory under /tmp
# (SLURM_CONF is set for the command; nothing under /etc is read or changed). It needs root (slurmd
# starts job steps) and Debian's slurm-wlm and munge (`make slurm`). Exit status: the command's;
# 1 when the cluster could not start (the daemon and its own message are printed).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
exec "$python" "$root/tests/slurm_cluster.py" "$@"
