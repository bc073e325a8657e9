#!/usr/bin/env bash
# The recipe with two initializations, on ten new seeds (docs/tasks.md#the-recipe-on-ten-new-seeds): config/parity.py as it
# stood (RECIPE pins it: two initializations of 1,500 steps each at a constant learning rate after warm-up, the screened probe read
# every 50 steps keeping the best checkpoint of both) on seeds, data and test strings no choice was made on: its share
# of seeds passing each bar, its checkpoint rules against both bars, and its wall time alone.
#
#   bash assets/parity/inits/run.sh
#
# assets/parity/seeds/run.sh with this folder's defaults: CONDITIONS (norm-il), SEEDS (1031 .. 1040), the data
# (TASK_DATASET parity-2004, PREP_ARGS --seed=2004: beyond.parity's own probe), TEST_SEED (3004), OUT (a fresh
# out-study-parity/inits in RUNS, refused if it holds anything; STORE=1: this folder, and the stored results the pages
# quote are written over), RULES_BITS (32 64), RECIPE (the recipe as it ran: config/parity.py reads further since,
# assets/parity/reach) and TRAIN_ARGS after it (none); every other setting of
# that script passes through.
set -euo pipefail
cd "$(dirname "$0")/../../.."
CONDITIONS=${CONDITIONS:-norm-il} SEEDS=${SEEDS:-1031 1032 1033 1034 1035 1036 1037 1038 1039 1040}
TASK_DATASET=${TASK_DATASET:-parity-2004} PREP_ARGS=${PREP_ARGS:---seed=2004} TEST_SEED=${TEST_SEED:-3004}
RULES_BITS=${RULES_BITS:-32 64}
. assets/study.sh  # study_out
study_out parity/inits
CONDITIONS=$CONDITIONS SEEDS=$SEEDS TASK_DATASET=$TASK_DATASET PREP_ARGS=$PREP_ARGS TEST_SEED=$TEST_SEED OUT=$OUT STORE= \
    RULES_BITS=$RULES_BITS TRAIN_ARGS="${RECIPE:---select=beyond.tasks.screened_probe --inits=2 --max_iters=3000 --stop_score=-1} ${TRAIN_ARGS:-}" \
    bash assets/parity/seeds/run.sh
