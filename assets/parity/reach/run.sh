#!/usr/bin/env bash
# Parity at 256x the trained length with the reach read (docs/tasks.md#256x-the-trained-length): config/parity.py as it
# stands (initializations of 1,500 steps one after another, at most four, until a checkpoint passes every read of
# beyond.tasks.long_probe: the screened probe, then the probe's and the long split's strings at 1.25 and 2 loops a bit)
# on ten seeds no choice was made on, each with data of its own, scored as assets/parity/deep scores its runs (64 fresh
# strings each of 64, 512 and 2,048 bits to K=3,200 in one pass, the halting rule beside the fixed K); each run's
# training and scoring on one thread, two runs at once; the share of seeds passing each bar (beyond.tasks.BARS), what
# the select read initialization by initialization, and what each part cost. Then bfloat16 against float32: each run's
# 2,048-bit strings scored again under bfloat16 autocast, tabled as the float32 scorings are (bf16/accuracy.md).
#
#   bash assets/parity/reach/run.sh
#
# Settings (environment variables; the defaults are the study as it was run; relative paths from the repo root):
#   SEEDS        the training seeds (2501 .. 2510)
#   DATA_SEEDS   each run's data seed, in the same order (2601 .. 2610): python -m beyond.parity into DATA_DIR/parity-<it>
#   PREP_ARGS    python -m beyond.parity's other settings (none: its defaults, strings of 1-8 bits to train on)
#   TEST_SEED    the test strings' seed (3201)
#   DATA_DIR     (data); RUNS, where the run folders out-parity-s<seed> go (the repo root)
#   OUT          where accuracy.md, results.json, accuracy.png, evals.md, costs.md, scores/, bf16/ and logs/ go (a fresh
#                out-study-parity/reach in RUNS, refused if it holds anything; an OUT given keeps the seeds scored in it:
#                a stopped study goes on); STORE=1: this folder, the stored results the pages quote written over
#   TRAIN_ARGS   extra settings for every train.py run (none); TASK_ARGS for each scoring (assets/parity/deep's);
#                BF16_ARGS for each run's scoring in bfloat16 (the 2,048-bit strings of TASK_ARGS' list, under
#                --dtype=bfloat16), into bf16/s<seed>, its tables in logs/score-bf16-s<seed>.log and its wall seconds
#                in logs/score-bf16-s<seed>.wall; a seed scored so in an OUT given is kept
set -euo pipefail
cd "$(dirname "$0")/../../.."
SEEDS=${SEEDS:-2501 2502 2503 2504 2505 2506 2507 2508 2509 2510}
DATA_SEEDS=${DATA_SEEDS:-2601 2602 2603 2604 2605 2606 2607 2608 2609 2610}
TEST_SEED=${TEST_SEED:-3201} DATA_DIR=${DATA_DIR:-data} RUNS=${RUNS:-.} PREP_ARGS=${PREP_ARGS:-} TRAIN_ARGS=${TRAIN_ARGS:-}
. assets/study.sh  # task_study (study_out, lane, task_seed, PARITY_SCORING)
TASK_ARGS=${TASK_ARGS:-$PARITY_SCORING}
BF16_ARGS=${BF16_ARGS:-${PARITY_SCORING/--lengths=64,512,2048/--lengths=2048} --dtype=bfloat16}
task_study parity/reach parity config/parity.py
for s in "${seeds[@]}"; do
  if [ "${STORE:-}" = 1 ] || ! [ -s "$OUT/bf16/s$s/results.json" ]; then
    # shellcheck disable=SC2086  # each word a setting
    lane score_run "$RUNS/out-parity-s$s" "$OUT/bf16/s$s" "score-bf16-s$s" $BF16_ARGS
  fi
done
wait_lanes
merge_scores "$OUT/bf16" "$OUT/bf16"
# what the select read in each run, initialization by initialization, against the bars (assets/parity/evals.py)
python assets/parity/evals.py --results="$OUT/results.json" "$OUT"/logs/parity-s*.jsonl > "$OUT/evals.md"
# what each run cost: its training, its scoring and its scoring in bfloat16, in wall seconds (assets/task_costs.py)
python assets/task_costs.py "$OUT" --seeds="${seeds[*]}" > "$OUT/costs.md"
