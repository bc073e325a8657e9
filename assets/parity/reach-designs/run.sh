#!/usr/bin/env bash
# The blind-spot designs at 256x the trained length (docs/tasks.md#the-designs-at-256x): config/parity.py's recipe as it
# stands (assets/parity/reach: initializations of 1,500 steps, at most four, until a checkpoint passes every read of
# beyond.tasks.long_probe) with each design of CONDITIONS in place of its readout and inter-loop norm, on the seeds,
# data and test strings of assets/parity/reach, each run scored as that study scores its runs (64 fresh strings each
# of 64, 512 and 2,048 bits to K=3,200, the halting rule beside the fixed K); then every design's scorings and the
# recipe's own (assets/parity/reach's, stored) merged: each design's share of seeds passing each bar, with its 95%
# interval and the mean ||H_K|| at the deepest K.
#
#   bash assets/parity/reach-designs/run.sh
#   CONDITIONS="raw" SEEDS="2501 2502" DATA_SEEDS="2601 2602" bash assets/parity/reach-designs/run.sh
#
# Settings (environment variables; the defaults are the study as it was run; relative paths from the repo root):
#   CONDITIONS   the designs, each READOUT[-il][-pen][-damp][-noinj][-fixed] as assets/parity/designs names them
#                (study.sh's parity_design): norm (the norm readout without the inter-loop norm), raw, raw-il, alpha-il
#   SEEDS        the training seeds (2501 .. 2510); DATA_SEEDS each one's data seed, in the same order (2601 .. 2610)
#   TEST_SEED    the test strings' seed (3201); DATA_DIR (data); RUNS, where out-parity-<design>-s<seed> go (repo root)
#   PREP_ARGS    python -m beyond.parity's other settings (none); TRAIN_ARGS, extra settings for every train.py run
#                (none); TASK_ARGS, each scoring's (study.sh's PARITY_SCORING, assets/parity/reach's)
#   RESCUE_ARGS  each run's rescue scoring: the clamp and the cap (beyond.tasks' --interventions) on the 64- and 512-bit
#                strings of TASK_ARGS, to its deepest K (2,048 bits would be four times the 512 bits' cost, for each
#                intervention, as no intervention halts); none: no rescue. RESCUE_SEEDS, the seeds it reads (2505 ..
#                2510: those run once the rescue was added, their runs in RUNS)
#   RECIPE       the recipe's own scorings merged beside the designs (assets/parity/reach/scores: its s<seed> folders
#                of SEEDS; none: the designs alone)
#   OUT          where accuracy.md, results.json, accuracy.png and a folder for each design go (a fresh
#                out-study-parity/reach-designs in RUNS, refused if it holds anything; an OUT given keeps each design's
#                seeds scored in it: a stopped study goes on); STORE=1: this folder, the stored results written over
#
# Each design's folder is a task study's OUT, as assets/parity/reach's: accuracy.md, results.json, accuracy.png,
# evals.md, costs.md, scores/s<seed>/, logs/. The seeds run in the outer loop and the designs in the inner one, two
# runs at once on one thread each, so that a study stopped part way has every design on its first seeds.
set -euo pipefail
cd "$(dirname "$0")/../../.."
CONDITIONS=${CONDITIONS:-norm raw raw-il alpha-il}
SEEDS=${SEEDS:-2501 2502 2503 2504 2505 2506 2507 2508 2509 2510}
DATA_SEEDS=${DATA_SEEDS:-2601 2602 2603 2604 2605 2606 2607 2608 2609 2610}
TEST_SEED=${TEST_SEED:-3201} DATA_DIR=${DATA_DIR:-data} RUNS=${RUNS:-.} PREP_ARGS=${PREP_ARGS:-} TRAIN_ARGS=${TRAIN_ARGS:-}
RECIPE=${RECIPE-assets/parity/reach/scores}
. assets/study.sh  # design_study (study_out, lane, task_seed, merge_scores, parity_design), PARITY_SCORING
TASK_ARGS=${TASK_ARGS:-$PARITY_SCORING}
RESCUE_ARGS=${RESCUE_ARGS-${PARITY_SCORING/--lengths=64,512,2048/--lengths=64,512} --interventions=clamp,cap}
RESCUE_SEEDS=${RESCUE_SEEDS-2505 2506 2507 2508 2509 2510}
design_study parity/reach-designs parity config/parity.py
