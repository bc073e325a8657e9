#!/usr/bin/env bash
# Four epochs: the four per-loop conditions x 3 seeds trained 4 epochs of the CPU demo's text
# (config/cpu_long.py, 2,229 iterations, ~11 min a run here), their depth evaluation, calibrated
# halting, and the decoding speed and text of early exit with copied stand-ins (docs/four-epochs.md,
# early-exit.md here). The other studies on the 4-epoch models read these runs from $RUNS.
#
#   WT103=/path/to/wikitext-103 bash assets/cpu-long/run.sh
#
# Settings (environment variables; the defaults are the study as it was run; relative paths are
# from the repo root):
#   WT103        the folder with WikiText-103's wiki.valid.tokens and wiki.test.tokens (only to prepare the data)
#   DATA_DIR     prepare.py's output folder (data); DATASET the data set there (wt103-demo-bytes)
#   CONDITIONS   the conditions trained, each a config/<condition>.py; SEEDS the seeds (1 2 3)
#   RUNS         where the run folders out-<condition>-cpu-long-s<seed> are written (the repo root)
#   OUT          where the evaluation goes: results.json, tables.md, the figures, calibrated/, logs/
#                (a fresh out-study-cpu-long in RUNS, refused if it holds anything)
#   STORE        1: OUT is this folder, and the stored results the pages quote are written over
#   REPEATS      python -m beyond.sample's timed decoding runs per setting, of which early-exit.md takes the best (2)
#   TRAIN_ARGS   extra settings for every train.py run; EVAL_ARGS (and DECODE_ARGS: its decoding flags) for python -m beyond.eval_decode; SAMPLE_ARGS for
#                python -m beyond.sample (the CI's tiny sizes)
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA_DIR=${DATA_DIR:-data} DATASET=${DATASET:-wt103-demo-bytes}
CONDITIONS=${CONDITIONS:-norm_perloop raw_perloop penalty_perloop finalnorm_perloop}
SEEDS=${SEEDS:-1 2 3} RUNS=${RUNS:-.} REPEATS=${REPEATS:-2}
TRAIN_ARGS=${TRAIN_ARGS:-} EVAL_ARGS=${EVAL_ARGS:-} DECODE_ARGS=${DECODE_ARGS:-} SAMPLE_ARGS=${SAMPLE_ARGS:-}
. assets/study.sh  # study_out, prepare_wt103, train, train_grid, lane
study_out cpu-long
mkdir -p "$OUT/logs" "$OUT/calibrated"

# --- the data: the CPU demo's (WikiText-103's validation text to train on, its test text to validate)
prepare_wt103 bytes

# --- training, one run after the other; a run's output in logs/<run>.log, its log.jsonl copied
train_grid '{c}-cpu-long-s{s}' 'config/{c}.py' config/cpu.py config/cpu_long.py

# --- evaluation: K = 1..8 on the first 131,072 validation bytes, the clamp, the readout criteria's exits with
# copied stand-ins (the exits of the time), Lemma 2 to 30 loops, the drift; then calibrated halting apart
runs=()
for c in $CONDITIONS; do for s in $SEEDS; do runs+=("$RUNS/out-$c-cpu-long-s$s"); done; done
python -m beyond.eval_decode "${runs[@]}" --max_tokens 131072 --clamp --exit 0.5,0.7,0.9 --criteria max_prob,entropy \
    --stand_in copy --lemma_loops 30 --curves --out "$OUT" $EVAL_ARGS $DECODE_ARGS > "$OUT/tables.md"
python -m beyond.eval_decode "${runs[@]}" --max_tokens 131072 --calibrate 0.01,0.05 --criteria max_prob,entropy \
    --stand_in copy --out "$OUT/calibrated" $EVAL_ARGS $DECODE_ARGS > "$OUT/calibrated/tables.md"

# --- early-exit.md: the decoding speed of the first seed's runs (the summary line python -m beyond.sample writes to stderr;
# the page takes the best of REPEATS runs), and the text of raw_perloop with and without exits
first=${SEEDS%% *}
for c in $CONDITIONS; do
  log="$OUT/logs/$c-cpu-long-s$first.sample-speed.log"
  : > "$log"
  for r in $(seq "$REPEATS"); do
    for flags in "" --kv_cache=False --exit_threshold=0.5 --exit_threshold=0.9 --exit_threshold=1e-9; do
      echo "== ${flags:-fixed K}, run $r" >> "$log"
      python -m beyond.sample --out_dir="$RUNS/out-$c-cpu-long-s$first" --start='The tower was' --num_samples=3 \
          --max_new_tokens=300 $flags $SAMPLE_ARGS > /dev/null 2>> "$log" || { tail -n 5 "$log" >&2; exit 1; }
    done
  done
done
if [[ " $CONDITIONS " == *" raw_perloop "* ]]; then
  for flags in "" --exit_threshold=0.9; do
    python -m beyond.sample --out_dir="$RUNS/out-raw_perloop-cpu-long-s$first" --start='The tower was' --num_samples=1 \
        --max_new_tokens=200 --seed=1 $flags $SAMPLE_ARGS
  done > "$OUT/logs/raw_perloop-cpu-long-s$first.sample.log"
fi
