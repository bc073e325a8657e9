#!/usr/bin/env bash
# Held out: the CPU demo's recipe (config/cpu.py, 300 iterations, bytes) on text and seeds it was never
# run on: Python's own documentation (the pydoc topics every CPython ships, 465 KB of English prose and
# code; every 8th topic validates) and seeds 11-13. The conditions that show the blind spot and its
# three fixes; then eval_depth.py at K = 1..8 with the clamp and the drift over training.
#
#   bash assets/heldout/run.sh
#
# Settings (environment variables; the defaults are the study as it was run; relative paths are
# from the repo root):
#   DATA_DIR     prepare.py's output folder (data); DATASET the data set there (pydoc-bytes)
#   CONDITIONS   the conditions trained, each a config/<condition>.py; SEEDS the seeds (11 12 13)
#   RUNS         where the run folders out-<condition>-cpu-s<seed> are written (the repo root)
#   OUT          where the evaluation goes: results.json, tables.md, the figures, logs/
#                (a fresh out-study-heldout in RUNS, refused if it holds anything)
#   STORE        1: OUT is this folder, and the stored results the pages quote are written over
#   TRAIN_ARGS   extra settings for every train.py run; EVAL_ARGS for eval_depth.py (the CI's tiny sizes)
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA_DIR=${DATA_DIR:-data} DATASET=${DATASET:-pydoc-bytes}
CONDITIONS=${CONDITIONS:-norm_perloop raw_perloop penalty_perloop interloop_perloop}
SEEDS=${SEEDS:-11 12 13} RUNS=${RUNS:-.}
TRAIN_ARGS=${TRAIN_ARGS:-} EVAL_ARGS=${EVAL_ARGS:-}
. assets/study.sh  # study_out, train, train_grid, lane
study_out heldout
mkdir -p "$OUT/logs"

# --- the data: the pydoc topics in name order, every 8th to validate, as text files, then bytes
if [ ! -d "$DATA_DIR/$DATASET" ]; then
  mkdir -p "$DATA_DIR/pydoc-text"
  python - "$DATA_DIR/pydoc-text" <<'PY'
import os, sys
from pydoc_data.topics import topics
names = sorted(topics)
for split, keep in (('train', lambda i: i % 8 != 7), ('val', lambda i: i % 8 == 7)):
    with open(os.path.join(sys.argv[1], f'{split}.txt'), 'w', encoding='utf-8') as f:
        f.write(''.join(topics[n] + '\n' for i, n in enumerate(names) if keep(i)))
PY
  python prepare.py --train_file "$DATA_DIR/pydoc-text/train.txt" --val_file "$DATA_DIR/pydoc-text/val.txt" --tokenizer bytes \
      --out_dir "$DATA_DIR/$DATASET" > "$OUT/logs/prepare.log" 2>&1
fi

# --- training: two runs at a time, one thread each; a run's output in logs/<run>.log, its log.jsonl copied
RUN_WITH=lane train_grid '{c}-cpu-s{s}' 'config/{c}.py' config/cpu.py

# --- evaluation: every run at K = 1..8 on the first 65,536 validation bytes, the clamp, the drift
runs=()
for s in $SEEDS; do
  for c in $CONDITIONS; do runs+=("$RUNS/out-$c-cpu-s$s"); done
done
python eval_depth.py "${runs[@]}" --max_tokens 65536 --max_loops 8 --clamp --curves --out "$OUT" $EVAL_ARGS \
    > "$OUT/tables.md"
