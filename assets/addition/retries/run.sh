#!/usr/bin/env bash
# Binary addition at 64x the trained length with retries (docs/tasks.md#a-second-task-binary-addition):
# config/addition.py as it stood (RECIPE; initializations of 3,000 steps one after another, at most four, until one keeps a
# checkpoint that reads every probe string right) on ten seeds no choice was made on, each with data of its own,
# scored as assets/addition scores its runs (the same 64 fresh additions each of 64 and 1,024 bits, test seed 5301)
# to K=1,536 in one pass, with the halting rule beside the fixed K; each run's training and scoring on one thread,
# two runs at once; the share of seeds passing each bar (beyond.tasks.BARS) and what each part cost.
#
#   bash assets/addition/retries/run.sh
#
# Settings (environment variables; the defaults are the study as it was run; relative paths from the repo root):
#   SEEDS        the training seeds (4501 .. 4510)
#   DATA_SEEDS   each run's data seed, in the same order (4601 .. 4610): python -m beyond.addition into DATA_DIR/addition-<it>
#   PREP_ARGS    python -m beyond.addition's other settings (none: its defaults)
#   TEST_SEED    the test strings' seed (5301, assets/addition's)
#   DATA_DIR     (data); RUNS, where the run folders out-addition-s<seed> go (the repo root)
#   OUT          where accuracy.md, results.json, accuracy.png, evals.md, scores/ and logs/ go (a fresh
#                out-study-addition/retries in RUNS, refused if it holds anything; an OUT given keeps the seeds scored
#                in it: a stopped study goes on);
#                STORE=1: this folder, the stored results the pages quote written over
#   RECIPE       settings on top of config/addition.py (the select this study ran: the screened probe; config/addition.py
#                reads further since: assets/addition/reach)
#   TRAIN_ARGS   extra settings for every train.py run, after RECIPE's (none); TASK_ARGS for each scoring (assets/addition's)
set -euo pipefail
cd "$(dirname "$0")/../../.."
SEEDS=${SEEDS:-4501 4502 4503 4504 4505 4506 4507 4508 4509 4510}
DATA_SEEDS=${DATA_SEEDS:-4601 4602 4603 4604 4605 4606 4607 4608 4609 4610}
TEST_SEED=${TEST_SEED:-5301} DATA_DIR=${DATA_DIR:-data} RUNS=${RUNS:-.} PREP_ARGS=${PREP_ARGS:-}
TRAIN_ARGS="${RECIPE:---select=beyond.tasks.screened_probe} ${TRAIN_ARGS:-}"
. assets/study.sh  # task_study (study_out, lane, task_seed, ADDITION_SCORING)
TASK_ARGS=${TASK_ARGS:-$ADDITION_SCORING}
task_study addition/retries addition config/addition.py
# what the probe saw in each run, initialization by initialization, against the bars (assets/parity/evals.py)
python assets/parity/evals.py --results="$OUT/results.json" "$OUT"/logs/addition-s*.jsonl > "$OUT/evals.md"
