#!/usr/bin/env bash
# Exit criteria on the 4-epoch models: the readout's (max_prob, entropy, converge), the state's
# (angular, latent) and two learned gates, teacher-forced against the oracle and decoded with
# calibrated thresholds; the agree-target gates; what a decision costs (docs/early-exit.md).
# Evaluates assets/cpu-long's runs (bash assets/cpu-long/run.sh), read from $RUNS; it trains their
# gates, written into each run folder. Each run is evaluated on its own, two at a time, one thread
# each; the merge times every calibrated pick again (--retime) and the costs are timed: run those on
# a quiet machine.
#
#   bash assets/cpu-long-criteria/run.sh
#
# Settings (environment variables; the defaults are the study as it was run; relative paths are
# from the repo root):
#   CONDITIONS   the conditions evaluated with every criterion, exits and calibration; SEEDS their seeds (1 2 3)
#   DRIFTED      runs also evaluated, without exits and calibration (norm_perloop-cpu-long-s1)
#   THRESHOLDS   a run also scored at thresholds 0.5, 0.9, 0.95, 0.99 (penalty_perloop-cpu-long-s1)
#   AGREE        runs whose gates are also trained with target 'agree' (raw_ and penalty_perloop-cpu-long-s1)
#   COSTS        the run whose decoding step is timed part by part (raw_perloop-cpu-long-s1); THREADS its threads (2)
#   RUNS         where the run folders are, and where each run's evaluation goes (the repo root)
#   OUT          where results.json, tables.md, exit_tables.md, the costs, the figures and logs/ go
#                (a fresh out-study-cpu-long-criteria in RUNS, refused if it holds anything)
#   STORE        1: OUT is this folder, and the stored results the pages quote are written over
#   EVAL_ARGS, DECODE_ARGS, GATE_ARGS, COST_ARGS   extra settings for python -m beyond.eval_decode (DECODE_ARGS: its decoding flags), beyond.exit_gate, beyond.depth_costs
#                (the CI's tiny sizes)
set -euo pipefail
cd "$(dirname "$0")/../.."
CONDITIONS=${CONDITIONS:-raw_perloop penalty_perloop} SEEDS=${SEEDS:-1 2 3}
DRIFTED=${DRIFTED-norm_perloop-cpu-long-s1} THRESHOLDS=${THRESHOLDS-penalty_perloop-cpu-long-s1}
AGREE=${AGREE-raw_perloop-cpu-long-s1 penalty_perloop-cpu-long-s1}
COSTS=${COSTS:-raw_perloop-cpu-long-s1} THREADS=${THREADS:-2}
RUNS=${RUNS:-.}
EVAL_ARGS=${EVAL_ARGS:-} DECODE_ARGS=${DECODE_ARGS:-} GATE_ARGS=${GATE_ARGS:-} COST_ARGS=${COST_ARGS:-}
CRITERIA=max_prob,entropy,converge,angular,latent,gate,gate-raw
. assets/study.sh  # study_out, lane, wait_lanes
study_out cpu-long-criteria
mkdir -p "$OUT/logs"

gate() {  # gate RUN NAME SETTINGS...: the gate RUN/NAME.pt (beyond.exit_gate); its one line in logs/RUN.NAME.log
  local run=$1 name=$2; shift 2
  python -m beyond.exit_gate --out_dir="$RUNS/out-$run" --name="$name" "$@" $GATE_ARGS 2> "$OUT/logs/$run.$name.log" \
      || { cat "$OUT/logs/$run.$name.log" >&2; return 1; }
}
evaluate() {  # evaluate RUN WHAT SETTINGS...: the run on the first 65,536 validation bytes; its tables in logs/RUN.WHAT.log
  local run=$1 what=$2; shift 2
  python -m beyond.eval_decode "$RUNS/out-$run" --max_tokens 65536 --max_loops 4 "$@" --out "$RUNS/$what-out-$run" \
      $EVAL_ARGS $DECODE_ARGS > "$OUT/logs/$run.$what.log"
}
study() {  # study RUN [FLAGS...]: the run's two gates (normalized and raw state), then its evaluation
  local run=$1; shift
  gate "$run" gate
  gate "$run" gate-raw --reads=raw
  evaluate "$run" eval --criteria=$CRITERIA "$@"
}

# --- every run apart, two at a time: exits at 0.9 with both stand-ins and calibrated halting within 1% and
# 5%; the drifted model (one loop is as good as four) teacher-forced only
results=()
for s in $SEEDS; do
  for c in $CONDITIONS; do
    lane study "$c-cpu-long-s$s" --exit 0.9 --stand_in copy,project --calibrate 0.01,0.05
    results+=("$RUNS/eval-out-$c-cpu-long-s$s/results.json")
  done
done
for run in $DRIFTED; do
  lane study "$run"
  results+=("$RUNS/eval-out-$run/results.json")
done
wait_lanes

# --- more thresholds on one run (logs/<run>.eval-thresholds.log), and the agree-target gates against the
# improve-target ones, teacher-forced (logs/<run>.eval-agree.log)
for run in $THRESHOLDS; do
  evaluate "$run" eval-thresholds --criteria=$CRITERIA --exit 0.5,0.9,0.95,0.99 --stand_in copy,project \
      --calibrate 0.01,0.05
done
for run in $AGREE; do
  gate "$run" gate-agree --target=agree
  gate "$run" gate-agree-raw --target=agree --reads=raw
  evaluate "$run" eval-agree --criteria=angular,gate,gate-raw,gate-agree,gate-agree-raw
done

# --- merged, every calibrated pick retimed; the early-exit page's two tables; the costs of a decoding step
python -m beyond.eval_decode --from_results "$(IFS=,; echo "${results[*]}")" --retime --out "$OUT" > "$OUT/tables.md"
python -m beyond.exit_tables "$OUT/results.json" > "$OUT/exit_tables.md"
OMP_NUM_THREADS=$THREADS python -m beyond.depth_costs "$RUNS/out-$COSTS" --prompt 64 $COST_ARGS \
    > "$OUT/costs-${COSTS%-cpu-long-s*}-float32.md"
