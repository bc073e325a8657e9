#!/usr/bin/env bash
# Parity at 256x the trained length (docs/tasks.md#256x-the-trained-length): config/parity.py as it stood (RECIPE) on ten seeds,
# each with data of its own, scored on 64 fresh strings each of 64, 512 and 2,048 bits to K=3,200 in one pass
# (python -m beyond.tasks --halt=latent --compile=on: each string's settled prefix held and not computed again), each
# run's training and scoring on one thread, two runs at once; the share of seeds passing the 256x bars
# (beyond.tasks.BARS) and what each part cost.
#
#   bash assets/parity/deep/run.sh
#
# Settings (environment variables; the defaults are the study as it was run; relative paths from the repo root):
#   SEEDS        the training seeds (2201 .. 2210)
#   DATA_SEEDS   each run's data seed, in the same order (2101 .. 2110): python -m beyond.parity into DATA_DIR/parity-<it>
#   PREP_ARGS    python -m beyond.parity's other settings (none: its defaults, strings of 1-8 bits to train on)
#   TEST_SEED    the test strings' seed (3101)
#   DATA_DIR     (data); RUNS, where the run folders out-parity-s<seed> go (the repo root)
#   OUT          where accuracy.md, results.json, accuracy.png, scores/ and logs/ go (a fresh out-study-parity/deep in RUNS,
#                refused if it holds anything; an OUT given keeps the seeds scored in it: a stopped study goes on);
#                STORE=1: this folder, the stored results the pages quote written over
#   RECIPE       settings on top of config/parity.py (the recipe as this study ran it: two initializations of 1,500 steps,
#                the best of both kept by the screened probe; config/parity.py reads further since: assets/parity/reach)
#   TRAIN_ARGS   extra settings for every train.py run, after RECIPE's (none); TASK_ARGS for each scoring (the lengths, K, strings and
#                the fast path above); FULL_ARGS for the first seed's scoring again without the fast path (512-bit strings
#                to K=1,280), which agree.py compares with its fast one
set -euo pipefail
cd "$(dirname "$0")/../../.."
SEEDS=${SEEDS:-2201 2202 2203 2204 2205 2206 2207 2208 2209 2210}
DATA_SEEDS=${DATA_SEEDS:-2101 2102 2103 2104 2105 2106 2107 2108 2109 2110}
TEST_SEED=${TEST_SEED:-3101} DATA_DIR=${DATA_DIR:-data} RUNS=${RUNS:-.} PREP_ARGS=${PREP_ARGS:-}
TRAIN_ARGS="${RECIPE:---select=beyond.tasks.screened_probe --inits=2 --max_iters=3000 --stop_score=-1} ${TRAIN_ARGS:-}"
FULL_ARGS=${FULL_ARGS:---lengths=512 --loops=$(seq -s, 64 64 1280) --rows=64 --compile=on}
. assets/study.sh  # task_study (study_out, lane, task_seed, PARITY_SCORING)
TASK_ARGS=${TASK_ARGS:-$PARITY_SCORING}
task_study parity/deep parity config/parity.py
# the fast path against the full pass: the first seed's run scored again, every position every loop
# shellcheck disable=SC2086  # each word a setting
python -m beyond.tasks --runs="$RUNS/out-parity-s${seeds[0]}" --seed="$TEST_SEED" --out="$OUT/full" $FULL_ARGS > "$OUT/logs/full.log"
python assets/parity/deep/agree.py "$OUT/scores/s${seeds[0]}/results.json" "$OUT/full/results.json" > "$OUT/agree.md"
