#!/usr/bin/env bash
# The recipe on ten new seeds (docs/tasks.md#a-48-bit-probe): config/parity.py as it stands (its probe split's
# 48-bit strings, an evaluation every 100 steps) on seeds, data and test strings no choice was made on: its share of
# seeds passing each bar, its checkpoint rules, and its wall time alone.
#
#   bash assets/parity/new-seeds/run.sh
#
# assets/parity/seeds/run.sh with this folder's defaults: CONDITIONS (norm-il), SEEDS (1011 .. 1020), the data
# (TASK_DATASET parity-2002, PREP_ARGS --seed=2002: beyond.parity's own probe), TEST_SEED (3002), OUT (a fresh
# out-study-parity/new-seeds in RUNS, refused if it holds anything; STORE=1: this folder, and the stored results the
# pages quote are written over), and an evaluation every 100 steps with the probe read whole (as this study was run)
# before TRAIN_ARGS; every other setting of that script passes through.
set -euo pipefail
cd "$(dirname "$0")/../../.."
. assets/study.sh  # study_out
study_out parity/new-seeds
CONDITIONS=${CONDITIONS:-norm-il} SEEDS=${SEEDS:-1011 1012 1013 1014 1015 1016 1017 1018 1019 1020} \
    TASK_DATASET=${TASK_DATASET:-parity-2002} PREP_ARGS=${PREP_ARGS:---seed=2002} TEST_SEED=${TEST_SEED:-3002} \
    OUT=$OUT STORE= TRAIN_ARGS="--eval_interval=100 --select=beyond.tasks.probe --inits=1 --lr_decay=cosine --max_iters=3000 --stop_score=-1 ${TRAIN_ARGS:-}" bash assets/parity/seeds/run.sh
