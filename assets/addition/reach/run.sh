#!/usr/bin/env bash
# Binary addition at 64x the trained length with the reach read (docs/tasks.md#a-second-task-binary-addition):
# config/addition.py as it stands (initializations of 3,000 steps one after another, at most four, until a checkpoint
# passes every read of beyond.tasks.long_probe: the screened probe, then the probe's and the long split's additions at
# 1.25 and 2 loops a position) on ten seeds no choice was made on, each with data of its own, scored as assets/addition
# scores its runs (64 fresh additions each of 64 and 1,024 bits, half a carry the whole length) to K=1,536 in one
# pass, with the halting rule beside the fixed K; each run's training and scoring on one thread, two runs at once; the
# share of seeds passing each bar (beyond.tasks.BARS), what the select read, and what each part cost.
#
#   bash assets/addition/reach/run.sh
#
# Settings (environment variables; the defaults are the study as it was run; relative paths from the repo root):
#   SEEDS        the training seeds (4701 .. 4710)
#   DATA_SEEDS   each run's data seed, in the same order (4801 .. 4810): python -m beyond.addition into DATA_DIR/addition-<it>
#   PREP_ARGS    python -m beyond.addition's other settings (none: its defaults)
#   TEST_SEED    the test strings' seed (5401)
#   DATA_DIR     (data); RUNS, where the run folders out-addition-s<seed> go (the repo root)
#   OUT          where accuracy.md, results.json, accuracy.png, evals.md, costs.md, scores/ and logs/ go (a fresh
#                out-study-addition/reach in RUNS, refused if it holds anything; an OUT given keeps the seeds scored in
#                it: a stopped study goes on); STORE=1: this folder, the stored results the pages quote written over
#   TRAIN_ARGS   extra settings for every train.py run (none); TASK_ARGS for each scoring (assets/addition's)
set -euo pipefail
cd "$(dirname "$0")/../../.."
SEEDS=${SEEDS:-4701 4702 4703 4704 4705 4706 4707 4708 4709 4710}
DATA_SEEDS=${DATA_SEEDS:-4801 4802 4803 4804 4805 4806 4807 4808 4809 4810}
TEST_SEED=${TEST_SEED:-5401} DATA_DIR=${DATA_DIR:-data} RUNS=${RUNS:-.} PREP_ARGS=${PREP_ARGS:-} TRAIN_ARGS=${TRAIN_ARGS:-}
. assets/study.sh  # task_study (study_out, lane, task_seed, ADDITION_SCORING)
TASK_ARGS=${TASK_ARGS:-$ADDITION_SCORING}
task_study addition/reach addition config/addition.py
# what the select read in each run, initialization by initialization, against the bars (assets/parity/evals.py)
python assets/parity/evals.py --results="$OUT/results.json" "$OUT"/logs/addition-s*.jsonl > "$OUT/evals.md"
# what each run cost: its training and its scoring, in wall seconds (assets/task_costs.py)
python assets/task_costs.py "$OUT" --seeds="${seeds[*]}" > "$OUT/costs.md"
