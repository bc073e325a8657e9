#!/usr/bin/env bash
# The recipe with a screened probe read every 50 steps, on ten new seeds (docs/tasks.md#the-screen-read-every-50-steps):
# config/parity.py as it stands (select = beyond.tasks.screened_probe, an evaluation every 50 steps) on seeds, data and
# test strings no choice was made on: its share of seeds passing each bar, its checkpoint rules against both bars (with
# the probe's rule over every 100th step's evaluations beside it: the same runs evaluated half as often), its wall
# time alone, and its wall time beside the recipe of assets/parity/new-seeds (the probe read whole every 100 steps).
#
#   bash assets/parity/screen/run.sh
#
# assets/parity/seeds/run.sh with this folder's defaults: CONDITIONS (norm-il), SEEDS (1021 .. 1030), the data
# (TASK_DATASET parity-2003, PREP_ARGS --seed=2003: beyond.parity's own probe), TEST_SEED (3003), OUT (a fresh
# out-study-parity/screen in RUNS, refused if it holds anything; STORE=1: this folder, and the stored results the pages
# quote are written over), RULES_BITS (32 64), RULES_ARGS (--every=100), and the config's select and evaluation interval
# before TRAIN_ARGS; every other setting of that script passes through.
set -euo pipefail
cd "$(dirname "$0")/../../.."
CONDITIONS=${CONDITIONS:-norm-il} SEEDS=${SEEDS:-1021 1022 1023 1024 1025 1026 1027 1028 1029 1030}
TASK_DATASET=${TASK_DATASET:-parity-2003} PREP_ARGS=${PREP_ARGS:---seed=2003} TEST_SEED=${TEST_SEED:-3003}
RULES_BITS=${RULES_BITS:-32 64} RULES_ARGS=${RULES_ARGS:---every=100}
RECIPE="--eval_interval=50 --select=beyond.tasks.screened_probe --inits=1 --lr_decay=cosine --max_iters=3000 --stop_score=-1"
WHOLE="--eval_interval=100 --select=beyond.tasks.probe --inits=1 --lr_decay=cosine --max_iters=3000 --stop_score=-1"
. assets/study.sh  # study_out, lane, timed_train
study_out parity/screen
CONDITIONS=$CONDITIONS SEEDS=$SEEDS TASK_DATASET=$TASK_DATASET PREP_ARGS=$PREP_ARGS TEST_SEED=$TEST_SEED OUT=$OUT STORE= \
    RULES_BITS=$RULES_BITS RULES_ARGS=$RULES_ARGS TRAIN_ARGS="$RECIPE ${TRAIN_ARGS:-}" bash assets/parity/seeds/run.sh
# the two recipes beside each other, one thread each on the first seed: the screened probe every 50 steps and the
# whole probe every 100, at the same time (logs/beside-<screened|whole>.log, logs/beside.seconds: each one's seconds)
DATA_DIR=${DATA_DIR:-data} RUNS=${RUNS:-.} DATASET=$TASK_DATASET TRAIN_ARGS=${TRAIN_ARGS:-}
# shellcheck disable=SC2086  # each word a setting
lane timed_train beside-screened parity-beside-screened config/parity.py $RECIPE --seed="${SEEDS%% *}"
# shellcheck disable=SC2086
lane timed_train beside-whole parity-beside-whole config/parity.py $WHOLE --seed="${SEEDS%% *}"
wait_lanes
for r in screened whole; do echo "$r $(cat "$OUT/logs/beside-$r.seconds")"; done > "$OUT/logs/beside.seconds"
rm "$OUT/logs/beside-screened.seconds" "$OUT/logs/beside-whole.seconds"
