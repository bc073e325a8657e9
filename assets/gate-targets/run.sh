#!/usr/bin/env bash
# The learned gate's target and what it reads: gates with target 'improve' at eps 0.02, 0.05 and 0.1,
# with target 'agree', and one reading the raw state, on the CPU demo's raw_perloop and norm_perloop,
# teacher-forced against the oracle (README.md here). Evaluates assets/cpu-demo's runs (bash
# assets/cpu-demo/run.sh), read from $RUNS; it trains their gates, written into each run folder.
#
#   bash assets/gate-targets/run.sh
#
# Settings (environment variables; the defaults are the study as README.md describes it; relative
# paths are from the repo root):
#   CONDITIONS   the CPU demo's conditions evaluated; SEED their seed (1: a guess, the measurement did not record it)
#   RUNS         where the run folders out-<condition>-cpu-s<seed> are (the repo root)
#   OUT          where results.json, tables.md, the figures and logs/ go
#                (a fresh out-study-gate-targets in RUNS, refused if it holds anything)
#   STORE        1: OUT is this folder, and the stored results the pages quote are written over
#   EVAL_ARGS, DECODE_ARGS, GATE_ARGS   extra settings for python -m beyond.eval_decode (DECODE_ARGS: its decoding flags) and beyond.exit_gate (the CI's tiny sizes)
set -euo pipefail
cd "$(dirname "$0")/../.."
CONDITIONS=${CONDITIONS:-raw_perloop norm_perloop} SEED=${SEED:-1}
RUNS=${RUNS:-.} EVAL_ARGS=${EVAL_ARGS:-} DECODE_ARGS=${DECODE_ARGS:-} GATE_ARGS=${GATE_ARGS:-}
. assets/study.sh  # study_out
study_out gate-targets
mkdir -p "$OUT/logs"

gate() {  # gate RUN NAME SETTINGS...: the gate RUN/NAME.pt (beyond.exit_gate); its one line in logs/RUN.NAME.log
  local run=$1 name=$2; shift 2
  python -m beyond.exit_gate --out_dir="$RUNS/out-$run" --name="$name" "$@" $GATE_ARGS 2> "$OUT/logs/$run.$name.log" \
      || { cat "$OUT/logs/$run.$name.log" >&2; return 1; }
}

# --- the gates, each from 65,536 training tokens
runs=()
for c in $CONDITIONS; do
  run=$c-cpu-s$SEED
  gate "$run" gate-eps02 --eps=0.02
  gate "$run" gate-eps05 --eps=0.05
  gate "$run" gate-eps10 --eps=0.1
  gate "$run" gate-agree --target=agree
  gate "$run" gate-raw --reads=raw
  runs+=("$RUNS/out-$run")
done

# --- teacher-forced mean loops within +1% / +5% of full depth on the first 65,536 validation bytes
python -m beyond.eval_decode "${runs[@]}" --max_tokens 65536 --max_loops 4 \
    --criteria=gate-eps02,gate-eps05,gate-eps10,gate-agree,gate-raw --out "$OUT" $EVAL_ARGS $DECODE_ARGS > "$OUT/tables.md"
