#!/usr/bin/env bash
# Depth that pays? (docs/tasks.md): running parity (prepare.py --task parity: train strings of 1-16 bits),
# the recipe of config/parity.py (window 2, no positions, injection, the progressive loss) with each readout
# of CONDITIONS and each seed of SEEDS, then every run scored by beyond.tasks at each test length and K.
#
#   bash assets/tasks/run.sh
#   CONDITIONS="raw norm" SEEDS="1 2 3" bash assets/tasks/run.sh
#
# Settings (environment variables; the defaults are the study as it was run; relative paths are from the
# repo root):
#   DATA_DIR     where prepare.py writes the task (data); TASK_DATASET its folder there (parity)
#   PREP_ARGS    extra prepare.py --task parity settings (the CI's tiny sizes: fewer rows)
#   CONDITIONS   the readouts trained, each a --readout of config/parity.py (raw norm)
#   SEEDS        the seeds (1)
#   RUNS         where the run folders out-parity-<readout>-s<seed> go (the repo root)
#   OUT          where results.json, accuracy.md, accuracy.png and logs/ go (this folder)
#   TRAIN_ARGS   extra settings for every train.py run; TASK_ARGS for python -m beyond.tasks (the CI's tiny sizes)
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA_DIR=${DATA_DIR:-data} TASK_DATASET=${TASK_DATASET:-parity} PREP_ARGS=${PREP_ARGS:-}
CONDITIONS=${CONDITIONS:-raw norm} SEEDS=${SEEDS:-1} RUNS=${RUNS:-.} OUT=${OUT:-assets/tasks}
TRAIN_ARGS=${TRAIN_ARGS:-} TASK_ARGS=${TASK_ARGS:---lengths=8,16,32 --loops=4,8,12,16,24,32,48,64,96,128,256,512 --interventions=clamp,direction,cap}
mkdir -p "$OUT/logs"
DATASET=$TASK_DATASET
. assets/study.sh  # train

[ -f "$DATA_DIR/$TASK_DATASET/meta.json" ] || python prepare.py --task parity --out_dir "$DATA_DIR/$TASK_DATASET" $PREP_ARGS \
    > "$OUT/logs/prepare.log"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
for s in $SEEDS; do for c in $CONDITIONS; do  # (train_grid puts {c} in names and configs, not in a setting)
  train "parity-$c-s$s" config/parity.py --readout="$c" --seed="$s"
done; done
runs=$(for s in $SEEDS; do for c in $CONDITIONS; do printf '%s,' "$RUNS/out-parity-$c-s$s"; done; done)
python -m beyond.tasks --runs="${runs%,}" --seed=1 --out="$OUT" $TASK_ARGS > "$OUT/accuracy.md"
