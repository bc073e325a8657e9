#!/usr/bin/env bash
# How often to read the screened probe (docs/tasks.md#the-screen-read-every-50-steps), chosen on the tuning seeds: the recipe with
# select = beyond.tasks.screened_probe read every 25 steps, every checkpoint kept, on seeds 101 .. 106 (data seed 100,
# test seed 3100, the seeds the recipe's other settings were tuned on); rules.py then keeps each run's checkpoint by the
# probe over every evaluation, over every 50th step's and over every 100th's, each pick scored against both bars.
#
#   bash assets/parity/screen-tuning/run.sh
#
# Settings (environment variables; relative paths from the repo root): DATA_DIR and TASK_DATASET (data, parity-100),
# PREP_ARGS (--seed=100), SEEDS (101 .. 106), TEST_SEED (3100), RUNS (the repo root), OUT (a fresh
# out-study-parity/screen-tuning in RUNS, refused if it holds anything), STORE (1: OUT is this folder, and the stored
# results the pages quote are written over), EVERY (50,100: the sparser intervals rules.py compares), TRAIN_ARGS (extra
# train.py settings), TASK_ARGS (--rows=256), LOOPS.
set -euo pipefail
cd "$(dirname "$0")/../../.."
DATA_DIR=${DATA_DIR:-data} TASK_DATASET=${TASK_DATASET:-parity-100} PREP_ARGS=${PREP_ARGS:---seed=100}
SEEDS=${SEEDS:-101 102 103 104 105 106} TEST_SEED=${TEST_SEED:-3100} RUNS=${RUNS:-.}
EVERY=${EVERY:-50,100} TRAIN_ARGS=${TRAIN_ARGS:-} TASK_ARGS=${TASK_ARGS:---rows=256} LOOPS=${LOOPS:-16,24,32,48,64,96,128,192,256,384}
DATASET=$TASK_DATASET
. assets/study.sh  # study_out, train, lane, parity_rules
study_out parity/screen-tuning
mkdir -p "$OUT/logs"

[ -f "$DATA_DIR/$TASK_DATASET/meta.json" ] || python -m beyond.parity --out_dir "$DATA_DIR/$TASK_DATASET" $PREP_ARGS \
    > "$OUT/logs/prepare.log"
for s in $SEEDS; do
  lane train "parity-norm-il-s$s" config/parity.py --select=beyond.tasks.screened_probe --eval_interval=25 --inits=1 --lr_decay=cosine --max_iters=3000 --stop_score=-1 \
      --seed="$s" --keep_checkpoints=True
done
wait_lanes
runs=$(for s in $SEEDS; do printf '%s,' "$RUNS/out-parity-norm-il-s$s"; done)
RULES_ARGS=--every=$EVERY parity_rules "${runs%,}" 32 64
