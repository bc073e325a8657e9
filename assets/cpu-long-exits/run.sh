#!/usr/bin/env bash
# Early exit in real decoding: copied and projected stand-ins, and calibrated halting, for the
# 4-epoch raw_perloop and penalty_perloop and for the same trained exit-aware at exit_train=0.5
# (docs/early-exit.md). Trains the exit-aware runs; the normally trained ones are assets/cpu-long's
# (bash assets/cpu-long/run.sh), read from $RUNS. Each seed is evaluated apart; the merge times every
# calibrated pick again (--retime), so run it on a quiet machine.
#
#   WT103=/path/to/wikitext-103 bash assets/cpu-long-exits/run.sh
#
# Settings (environment variables; the defaults are the study as it was run; relative paths are
# from the repo root):
#   WT103        the folder with WikiText-103's wiki.valid.tokens and wiki.test.tokens (only to prepare the data)
#   DATA_DIR     prepare.py's output folder (data); DATASET the data set there (wt103-demo-bytes)
#   CONDITIONS   the conditions (config/<condition>.py, and config/<condition>_exit.py for the exit-aware twin)
#   SEEDS        the seeds (1 2 3)
#   RUNS         where the run folders are read and written, and each seed's evaluation goes (the repo root)
#   OUT          where results.json, tables.md, the figures and logs/ go
#                (a fresh out-study-cpu-long-exits in RUNS, refused if it holds anything)
#   STORE        1: OUT is this folder, and the stored results the pages quote are written over
#   TRAIN_ARGS   extra settings for every train.py run; EVAL_ARGS (and DECODE_ARGS: its decoding flags) for python -m beyond.eval_decode (the CI's tiny sizes)
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA_DIR=${DATA_DIR:-data} DATASET=${DATASET:-wt103-demo-bytes}
CONDITIONS=${CONDITIONS:-raw_perloop penalty_perloop} SEEDS=${SEEDS:-1 2 3}
RUNS=${RUNS:-.}
TRAIN_ARGS=${TRAIN_ARGS:-} EVAL_ARGS=${EVAL_ARGS:-} DECODE_ARGS=${DECODE_ARGS:-}
. assets/study.sh  # study_out, prepare_wt103, train, train_grid, lane
study_out cpu-long-exits
mkdir -p "$OUT/logs"
TRAIN="-m beyond.exit_train"  # exit-aware training is beyond the paper: train.py with its model class

# --- the data: the CPU demo's (WikiText-103's validation text to train on, its test text to validate)
prepare_wt103 bytes

# --- training the exit-aware twins (half the tokens exit after a random loop), one after the other
train_grid '{c}_exit-cpu-long-s{s}' 'config/{c}_exit.py' config/cpu.py config/cpu_long.py --exit_train=0.5

# --- each seed's four runs on the first 65,536 validation bytes: the readout criteria's exits at 0.5 and 0.9
# with both stand-ins (the criteria of the time), calibrated halting within 1% and 5%
results=()
for s in $SEEDS; do
  runs=()
  for c in $CONDITIONS; do runs+=("$RUNS/out-$c-cpu-long-s$s" "$RUNS/out-${c}_exit-cpu-long-s$s"); done
  python -m beyond.eval_decode "${runs[@]}" --max_tokens 65536 --max_loops 4 --exit 0.5,0.9 --calibrate 0.01,0.05 \
      --criteria max_prob,entropy,converge --out "$RUNS/eval-exit-s$s" $EVAL_ARGS $DECODE_ARGS > /dev/null
  results+=("$RUNS/eval-exit-s$s/results.json")
done

# --- merged, every calibrated pick's decode speed-up timed again
python -m beyond.eval_decode --from_results "$(IFS=,; echo "${results[*]}")" --retime --out "$OUT" > "$OUT/tables.md"
