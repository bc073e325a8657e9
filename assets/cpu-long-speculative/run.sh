#!/usr/bin/env bash
# Speculative decoding with the model's own first loops, on seed 1 of the 4-epoch per-loop runs
# (docs/speculative.md). Only evaluates: the runs are assets/cpu-long's (bash assets/cpu-long/run.sh),
# read from $RUNS. It times decoding at batch 1: run it on a quiet machine.
#
#   bash assets/cpu-long-speculative/run.sh
#
# Settings (environment variables; the defaults are the study as it was run; relative paths are
# from the repo root):
#   CONDITIONS   the conditions evaluated; SEED the seed (1)
#   RUNS         where the run folders out-<condition>-cpu-long-s<seed> are (the repo root)
#   OUT          where results.json, tables.md and the figures go
#                (a fresh out-study-cpu-long-speculative in RUNS, refused if it holds anything)
#   STORE        1: OUT is this folder, and the stored results the pages quote are written over
#   EVAL_ARGS, DECODE_ARGS   extra settings for python -m beyond.eval_decode (its decoding flags in DECODE_ARGS) (the CI's tiny sizes)
set -euo pipefail
cd "$(dirname "$0")/../.."
CONDITIONS=${CONDITIONS:-norm_perloop raw_perloop penalty_perloop finalnorm_perloop} SEED=${SEED:-1}
RUNS=${RUNS:-.} EVAL_ARGS=${EVAL_ARGS:-} DECODE_ARGS=${DECODE_ARGS:-}
. assets/study.sh  # study_out
study_out cpu-long-speculative
mkdir -p "$OUT"

# --- the first 16,384 validation bytes at K = 1..4; speculative decoding timed at every draft depth j,
# draft length g and draft_stop, against fixed K in the same run
runs=()
for c in $CONDITIONS; do runs+=("$RUNS/out-$c-cpu-long-s$SEED"); done
python -m beyond.eval_decode "${runs[@]}" --max_tokens 16384 --max_loops 4 --speculative --out "$OUT" $EVAL_ARGS $DECODE_ARGS \
    > "$OUT/tables.md"
