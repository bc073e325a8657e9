#!/usr/bin/env bash
# The CPU demo: the eight conditions x 3 seeds, 300 iterations of config/cpu.py each, and their
# depth evaluation (docs/cpu-demo.md). Two training runs at a time, one thread each: about 40 min
# of training on 2 cores, then 20-30 min of evaluation.
#
#   WT103=/path/to/wikitext-103 bash assets/cpu-demo/run.sh
#
# Settings (environment variables; the defaults are the study as it was run; relative paths are
# from the repo root):
#   WT103        the folder with WikiText-103's wiki.valid.tokens and wiki.test.tokens (only to prepare the data)
#   DATA_DIR     prepare.py's output folder (data); DATASET the data set there (wt103-demo-bytes)
#   CONDITIONS   the conditions trained, each a config/<condition>.py; SEEDS the seeds (1 2 3)
#   RUNS         where the run folders out-<condition>-cpu-s<seed> are written (the repo root)
#   OUT          where the evaluation goes: results.json, tables.md, the figures, logs/
#                (a fresh out-study-cpu-demo in RUNS, refused if it holds anything)
#   STORE        1: OUT is this folder, and the stored results the pages quote are written over
#   TRAIN_ARGS   extra settings for every train.py run; EVAL_ARGS (and DECODE_ARGS: its decoding flags) for python -m beyond.eval_decode (the CI's tiny sizes)
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA_DIR=${DATA_DIR:-data} DATASET=${DATASET:-wt103-demo-bytes}
CONDITIONS=${CONDITIONS:-"norm_perloop raw_perloop finalnorm_perloop penalty_perloop interloop_perloop
    norm_terminal raw_terminal penalty_terminal"}
SEEDS=${SEEDS:-1 2 3} RUNS=${RUNS:-.}
TRAIN_ARGS=${TRAIN_ARGS:-} EVAL_ARGS=${EVAL_ARGS:-} DECODE_ARGS=${DECODE_ARGS:-}
. assets/study.sh  # study_out, prepare_wt103, train, train_grid, lane
study_out cpu-demo
mkdir -p "$OUT/logs"

# --- the data: WikiText-103's validation text to train on, its test text to validate, as bytes
prepare_wt103 bytes

# --- training: two runs at a time, one thread each; a run's output in logs/<run>.log, its log.jsonl copied
RUN_WITH=lane train_grid '{c}-cpu-s{s}' 'config/{c}.py' config/cpu.py

# --- evaluation: every run at K = 1..8 on the first 131,072 validation bytes, the clamp, the two readout
# criteria with copied stand-ins (the exits of the time), Lemma 2 to 30 loops, the drift over training
runs=()
for s in $SEEDS; do
  for c in $(printf '%s\n' $CONDITIONS | sort); do runs+=("$RUNS/out-$c-cpu-s$s"); done
done
python -m beyond.eval_decode "${runs[@]}" --max_tokens 131072 --clamp --exit 0.5,0.7,0.9 --criteria max_prob,entropy \
    --stand_in copy --lemma_loops 30 --curves --out "$OUT" $EVAL_ARGS $DECODE_ARGS > "$OUT/tables.md"
