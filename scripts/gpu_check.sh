#!/usr/bin/env bash
# The prepared GPU check (benchmarks/gpu_check.py): bash scripts/gpu_check.sh OUTDIR [--smoke] [--only PART]
# On the GPU machine, under 8 minutes; --smoke: tiny sizes on a CPU, in seconds. Log: OUTDIR/gpu_check.log.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python}" benchmarks/gpu_check.py "$@"
