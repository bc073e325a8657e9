#!/usr/bin/env bash
# Exit-aware training at exit_train=0.25 (3 seeds) and 0.1 (seed 1), against the normally trained
# 4-epoch raw_perloop and penalty_perloop (docs/early-exit.md; assets/cpu-long-exits holds 0.5).
# Trains the exit-aware runs; the normally trained ones are assets/cpu-long's (bash
# assets/cpu-long/run.sh), read from $RUNS. Each seed is evaluated apart; the merge times every
# calibrated pick again (--retime), so run it on a quiet machine.
#
#   WT103=/path/to/wikitext-103 bash assets/cpu-long-exit-sweep/run.sh
#
# Settings (environment variables; the defaults are the study as it was run; relative paths are
# from the repo root):
#   WT103        the folder with WikiText-103's wiki.valid.tokens and wiki.test.tokens (only to prepare the data)
#   DATA_DIR     prepare.py's output folder (data); DATASET the data set there (wt103-demo-bytes)
#   CONDITIONS   the conditions (config/<condition>.py, and config/<condition>_exit.py for the exit-aware twins)
#   SEEDS        the seeds at exit_train=0.25 (1 2 3); SEEDS_10 those also trained at 0.1 (1)
#   RUNS         where the run folders are read and written, and each seed's evaluation goes (the repo root)
#   OUT          where results.json, tables.md, the figures and logs/ go
#                (a fresh out-study-cpu-long-exit-sweep in RUNS, refused if it holds anything)
#   STORE        1: OUT is this folder, and the stored results the pages quote are written over
#   TRAIN_ARGS   extra settings for every train.py run; EVAL_ARGS (and DECODE_ARGS: its decoding flags) for python -m beyond.eval_decode (the CI's tiny sizes)
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA_DIR=${DATA_DIR:-data} DATASET=${DATASET:-wt103-demo-bytes}
CONDITIONS=${CONDITIONS:-raw_perloop penalty_perloop} SEEDS=${SEEDS:-1 2 3} SEEDS_10=${SEEDS_10-1}
RUNS=${RUNS:-.}
TRAIN_ARGS=${TRAIN_ARGS:-} EVAL_ARGS=${EVAL_ARGS:-} DECODE_ARGS=${DECODE_ARGS:-}
. assets/study.sh  # study_out, prepare_wt103, train, train_grid, lane
study_out cpu-long-exit-sweep
mkdir -p "$OUT/logs"
TRAIN="-m beyond.exit_train"  # exit-aware training is beyond the paper: train.py with its model class

# --- the data: the CPU demo's (WikiText-103's validation text to train on, its test text to validate)
prepare_wt103 bytes

# --- training the exit-aware twins, one after the other
train_grid '{c}_exit25-cpu-long-s{s}' 'config/{c}_exit.py' config/cpu.py config/cpu_long.py --exit_train=0.25
SEEDS=$SEEDS_10 train_grid '{c}_exit10-cpu-long-s{s}' 'config/{c}_exit.py' config/cpu.py config/cpu_long.py --exit_train=0.1

# --- each seed's runs on the first 65,536 validation bytes: the readout criteria's exits at 0.5 and 0.9 with
# both stand-ins (the criteria of the time), calibrated halting within 1% and 5%
results=()
for s in $SEEDS; do
  runs=()
  for c in $CONDITIONS; do runs+=("$RUNS/out-$c-cpu-long-s$s"); done
  for c in $CONDITIONS; do
    if [[ " $SEEDS_10 " == *" $s "* ]]; then runs+=("$RUNS/out-${c}_exit10-cpu-long-s$s"); fi
    runs+=("$RUNS/out-${c}_exit25-cpu-long-s$s")
  done
  python -m beyond.eval_decode "${runs[@]}" --max_tokens 65536 --max_loops 4 --exit 0.5,0.9 --calibrate 0.01,0.05 \
      --criteria max_prob,entropy,converge --out "$RUNS/eval-sweep-s$s" $EVAL_ARGS $DECODE_ARGS > /dev/null
  results+=("$RUNS/eval-sweep-s$s/results.json")
done

# --- merged, every calibrated pick's decode speed-up timed again
python -m beyond.eval_decode --from_results "$(IFS=,; echo "${results[*]}")" --retime --out "$OUT" > "$OUT/tables.md"
