#!/usr/bin/env bash
# Binary addition at 64x the trained length (docs/tasks.md#a-second-task-binary-addition): config/addition.py as it
# stands on ten seeds, each with data of its own (trained on additions of 1-16 bits, half of each split a carry the
# whole length), scored on 64 fresh additions each of 64 and 1,024 bits (half a carry the whole length, a quarter its
# mirror) to K=1,536 in one pass (python -m beyond.tasks --halt=latent --compile=on: each string's settled prefix held,
# and the halting rule, a K chosen without labels, tabled beside the fixed K); each run's training and scoring on one
# thread, two runs at once; the share of seeds passing each bar (beyond.tasks.BARS) and what each part cost.
#
#   bash assets/addition/run.sh
#
# Settings (environment variables; the defaults are the study as it was run; relative paths from the repo root):
#   SEEDS        the training seeds (4301 .. 4310)
#   DATA_SEEDS   each run's data seed, in the same order (4401 .. 4410): python -m beyond.addition into DATA_DIR/addition-<it>
#   PREP_ARGS    python -m beyond.addition's other settings (none: its defaults)
#   TEST_SEED    the test strings' seed (5301)
#   DATA_DIR     (data); RUNS, where the run folders out-addition-s<seed> go (the repo root)
#   OUT          where accuracy.md, results.json, accuracy.png, scores/ and logs/ go (a fresh out-study-addition in RUNS,
#                refused if it holds anything; an OUT given keeps the seeds scored in it: a stopped study goes on);
#                STORE=1: this folder, the stored results the pages quote written over
#   RECIPE       settings on top of config/addition.py (one initialization of 3,000 steps and the screened probe, the
#                recipe as this study ran it; config/addition.py retries and reads further since: assets/addition/retries,
#                assets/addition/reach)
#   TRAIN_ARGS   extra settings for every train.py run, after RECIPE's (none); TASK_ARGS for each scoring (the lengths,
#                K, strings and the fast path above)
set -euo pipefail
cd "$(dirname "$0")/../.."
SEEDS=${SEEDS:-4301 4302 4303 4304 4305 4306 4307 4308 4309 4310}
DATA_SEEDS=${DATA_SEEDS:-4401 4402 4403 4404 4405 4406 4407 4408 4409 4410}
TEST_SEED=${TEST_SEED:-5301} DATA_DIR=${DATA_DIR:-data} RUNS=${RUNS:-.} PREP_ARGS=${PREP_ARGS:-}
TRAIN_ARGS="${RECIPE:---inits=1 --max_iters=3000 --select=beyond.tasks.screened_probe} ${TRAIN_ARGS:-}"
. assets/study.sh  # task_study (study_out, lane, task_seed, ADDITION_SCORING)
TASK_ARGS=${TASK_ARGS:-$ADDITION_SCORING}
task_study addition addition config/addition.py
