#!/usr/bin/env bash
# The blind-spot designs on binary addition (docs/tasks.md#what-is-not-known): config/addition.py's recipe as it
# stands (assets/addition/reach: initializations one after another, at most four, until a checkpoint passes every read
# of beyond.tasks.long_probe) with each design of CONDITIONS in place of its readout and inter-loop norm, on the seeds,
# data and test strings of assets/addition/reach, each run scored as that study scores its runs (64 fresh additions
# each of 64 and 1,024 bits, at least half of them with carries across the whole length, to K=1,536, the halting rule
# beside the fixed K); then every design's scorings and the recipe's own (assets/addition/reach's, stored) merged: each
# design's share of seeds passing each bar, with its 95% interval and the mean ||H_K|| at the deepest K.
#
#   bash assets/addition/reach-designs/run.sh
#   CONDITIONS="raw" SEEDS="4701 4702" DATA_SEEDS="4801 4802" bash assets/addition/reach-designs/run.sh
#
# Settings (environment variables; the defaults are the study as it was run; relative paths from the repo root):
#   CONDITIONS   the designs, each READOUT[-il][-pen][-damp][-noinj][-fixed] as assets/parity/designs names them
#                (study.sh's parity_design): norm (the norm readout without the inter-loop norm), raw, raw-il, alpha-il
#   SEEDS        the training seeds (4701 .. 4710); DATA_SEEDS each one's data seed, in the same order (4801 .. 4810)
#   TEST_SEED    the test strings' seed (5401); DATA_DIR (data); RUNS, where out-addition-<design>-s<seed> go (repo root)
#   PREP_ARGS    python -m beyond.addition's other settings (none); TRAIN_ARGS, extra settings for every train.py run
#                (none); TASK_ARGS, each scoring's (study.sh's ADDITION_SCORING, assets/addition/reach's)
#   RESCUE_ARGS  each run's rescue scoring: the clamp and the cap (beyond.tasks' --interventions) on the 64-bit additions
#                of TASK_ARGS, to its deepest K (the 1,024-bit ones would be sixteen times the cost, for each
#                intervention, as no intervention halts); none: no rescue. RESCUE_SEEDS, the seeds it reads (all of SEEDS)
#   RECIPE       the recipe's own scorings merged beside the designs (assets/addition/reach/scores: its s<seed> folders
#                of SEEDS; none: the designs alone)
#   OUT          where accuracy.md, results.json, accuracy.png and a folder for each design go (a fresh
#                out-study-addition/reach-designs in RUNS, refused if it holds anything; an OUT given keeps each
#                design's seeds scored in it: a stopped study goes on); STORE=1: this folder, the stored results written
#                over
#
# Each design's folder is a task study's OUT, as assets/addition/reach's (study.sh's design_study).
set -euo pipefail
cd "$(dirname "$0")/../../.."
CONDITIONS=${CONDITIONS:-norm raw raw-il alpha-il}
SEEDS=${SEEDS:-4701 4702 4703 4704 4705 4706 4707 4708 4709 4710}
DATA_SEEDS=${DATA_SEEDS:-4801 4802 4803 4804 4805 4806 4807 4808 4809 4810}
TEST_SEED=${TEST_SEED:-5401} DATA_DIR=${DATA_DIR:-data} RUNS=${RUNS:-.} PREP_ARGS=${PREP_ARGS:-} TRAIN_ARGS=${TRAIN_ARGS:-}
RECIPE=${RECIPE-assets/addition/reach/scores}
. assets/study.sh  # design_study (study_out, lane, task_seed, merge_scores, parity_design), ADDITION_SCORING
TASK_ARGS=${TASK_ARGS:-$ADDITION_SCORING}
RESCUE_ARGS=${RESCUE_ARGS-${ADDITION_SCORING/--lengths=64,1024/--lengths=64} --interventions=clamp,cap}
design_study addition/reach-designs addition config/addition.py
