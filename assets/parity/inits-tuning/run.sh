#!/usr/bin/env bash
# How many initializations, at which learning rate schedule (docs/tasks.md#two-initializations), chosen on the tuning
# seeds: the recipe with its screened probe read every 50 steps, trained as one initialization at a constant learning
# rate, as three at a cosine or a constant one, and as two at a constant one, on seeds 101 .. 106 (data seed 100);
# inits.py then counts, run by run and initialization by initialization, the evaluations with every probe string right,
# beside the recipe's one cosine initialization (assets/parity/screen-tuning's runs, their evaluations every 50 steps).
#
#   bash assets/parity/inits-tuning/run.sh
#
# Settings (environment variables; relative paths from the repo root): DATA_DIR and TASK_DATASET (data, parity-100),
# PREP_ARGS (--seed=100), SEEDS (101 .. 106), RUNS (the repo root), OUT (a fresh out-study-parity/inits-tuning in RUNS,
# refused if it holds anything), STORE (1: OUT is this folder, and the stored results the pages quote are written over),
# TRAIN_ARGS (extra train.py settings), BASELINE (the recipe's logs: assets/parity/screen-tuning/logs, stored),
# EVERY (50: the baseline's evaluations read).
set -euo pipefail
cd "$(dirname "$0")/../../.."
DATA_DIR=${DATA_DIR:-data} TASK_DATASET=${TASK_DATASET:-parity-100} PREP_ARGS=${PREP_ARGS:---seed=100}
SEEDS=${SEEDS:-101 102 103 104 105 106} RUNS=${RUNS:-.} TRAIN_ARGS=${TRAIN_ARGS:-}
BASELINE=${BASELINE:-assets/parity/screen-tuning/logs} EVERY=${EVERY:-50}
DATASET=$TASK_DATASET
. assets/study.sh  # study_out, train, lane
study_out parity/inits-tuning
mkdir -p "$OUT/logs"

[ -f "$DATA_DIR/$TASK_DATASET/meta.json" ] || python -m beyond.parity --out_dir "$DATA_DIR/$TASK_DATASET" $PREP_ARGS \
    > "$OUT/logs/prepare.log"
VARIANTS=("const 1 constant" "i3cos 3 cosine" "i3con 3 constant" "i2con 2 constant")  # NAME INITS LR_DECAY
for v in "${VARIANTS[@]}"; do
  read -r name inits decay <<< "$v"
  for s in $SEEDS; do
    lane train "parity-$name-s$s" config/parity.py --inits="$inits" --lr_decay="$decay" --max_iters=3000 --stop_score=-1 --eval_interval=50 \
        --select=beyond.tasks.screened_probe --seed="$s"
  done
done
wait_lanes
logs() { for s in $SEEDS; do printf '%s ' "$1-s$s.jsonl"; done; }
{
  # shellcheck disable=SC2046  # one log per seed
  python assets/parity/inits-tuning/inits.py --header --name="1, cosine (the screened recipe)" --every="$EVERY" $(logs "$BASELINE/parity-norm-il")
  for v in "${VARIANTS[@]}"; do
    read -r name inits decay <<< "$v"
    # shellcheck disable=SC2046
    python assets/parity/inits-tuning/inits.py --name="$inits, $decay" --inits="$inits" $(logs "$OUT/logs/parity-$name")
  done
} > "$OUT/inits.md"
