#!/usr/bin/env bash
# Depth that pays on every seed? (docs/tasks.md#the-probes-checkpoint): config/parity.py's recipe (norm-il: the checkpoint its probe split
# scores best) and the blind-spot designs beside it, each on ten seeds, with the data drawn at a seed of its own and
# the test strings at another; each run passes or fails the bars beyond.tasks fixed before training (BARS), and
# the designs' shares of seeds that pass are tabled with their 95% intervals.
#
#   bash assets/parity/seeds/run.sh
#
# Settings (environment variables; the defaults are the study as it was run; relative paths from the repo root):
#   DATA_DIR     where beyond.parity writes the task (data); TASK_DATASET its folder there (parity-2001)
#   PREP_ARGS    python -m beyond.parity settings (--seed=2001 --probe_lengths=24: the data's own seed, and the
#                probe of 24-bit strings this study was run with)
#   CONDITIONS   the designs, READOUT[-il][-pen][-damp][-noinj][-fixed] as assets/parity/designs/run.sh (norm-il norm raw raw-il)
#   SEEDS        the training seeds (1001 .. 1010)
#   TEST_SEED    the test strings' seed (3001)
#   RUNS         where the run folders out-parity-<design>-s<seed> go (the repo root)
#   OUT          where accuracy.md, results.json, accuracy.png, evals.md, scores/ and logs/ go
#                (a fresh out-study-parity/seeds in RUNS, refused if it holds anything)
#   STORE        1: OUT is this folder, and the stored results the pages quote are written over
#   TRAIN_ARGS   extra settings for every train.py run (--eval_interval=50 --select=beyond.tasks.probe --inits=1 --lr_decay=cosine --max_iters=3000 --stop_score=-1: the
#                probe read whole and one initialization at a cosine learning rate, as this study was run; each run keeps every evaluation's checkpoint, for rules.py's
#                comparison of the checkpoint rules on the first design's runs); TASK_ARGS for each scoring (--rows=256)
#   RULES_BITS   the bars rules.py scores the first design's checkpoint rules against (32: rules.md; 64: rules-64.md)
#   RULES_ARGS   extra settings for rules.py (none; --every=100 adds the probe's rule over every 100th step's evaluations)
#   LOOPS        the K scored (to 384 on 32-bit strings; 64-bit ones to 256)
set -euo pipefail
cd "$(dirname "$0")/../../.."
DATA_DIR=${DATA_DIR:-data} TASK_DATASET=${TASK_DATASET:-parity-2001} PREP_ARGS=${PREP_ARGS:---seed=2001 --probe_lengths=24}
CONDITIONS=${CONDITIONS:-norm-il norm raw raw-il} SEEDS=${SEEDS:-1001 1002 1003 1004 1005 1006 1007 1008 1009 1010}
TEST_SEED=${TEST_SEED:-3001} RUNS=${RUNS:-.}
TRAIN_ARGS=${TRAIN_ARGS:---eval_interval=50 --select=beyond.tasks.probe --inits=1 --lr_decay=cosine --max_iters=3000 --stop_score=-1} TASK_ARGS=${TASK_ARGS:---rows=256}
LOOPS=${LOOPS:-16,24,32,48,64,96,128,192,256,384} RULES_BITS=${RULES_BITS:-32} RULES_ARGS=${RULES_ARGS:-}
DATASET=$TASK_DATASET
. assets/study.sh  # study_out, train, lane, parity_design, parity_rules, timed_train
study_out parity/seeds
mkdir -p "$OUT/logs" "$OUT/scores"

[ -f "$DATA_DIR/$TASK_DATASET/meta.json" ] || python -m beyond.parity --out_dir "$DATA_DIR/$TASK_DATASET" $PREP_ARGS \
    > "$OUT/logs/prepare.log"
for c in $CONDITIONS; do parity_design "$c" > /dev/null; done  # a bad name stops here, before any training
for c in $CONDITIONS; do for s in $SEEDS; do
  # shellcheck disable=SC2046  # parity_design's words are separate settings
  lane train "parity-$c-s$s" config/parity.py $(parity_design "$c") --seed="$s" --keep_checkpoints=True  # (rules.py)
done; done
wait_lanes
# each design scored on 32-bit strings to K=384 with the training-free rescues, and on 64-bit ones to K=256 (the
# bars' deepest K), two scorings at once
for length in 32 64; do for c in $CONDITIONS; do
  runs=$(for s in $SEEDS; do printf '%s,' "$RUNS/out-parity-$c-s$s"; done)
  if [ $length = 32 ]; then loops=$LOOPS rescues=--interventions=clamp,cap,relax; else loops=${LOOPS%,384} rescues=; fi
  lane python -m beyond.tasks --runs="${runs%,}" --lengths=$length --loops="$loops" $rescues --seed="$TEST_SEED" \
      --out="$OUT/scores/$c-$length" $TASK_ARGS > "$OUT/logs/score-$c-$length.log"
done; done
wait_lanes
merge=$(for c in $CONDITIONS; do printf '%s,' "$OUT/scores/$c-32/results.json" "$OUT/scores/$c-64/results.json"; done)
python -m beyond.tasks --merge="${merge%,}" --out="$OUT" > "$OUT/accuracy.md"
# what the probe saw in the first design's runs, run by run, against the bars (assets/parity/evals.py)
logs=$(for s in $SEEDS; do printf '%s ' "$OUT/logs/parity-${CONDITIONS%% *}-s$s.jsonl"; done)
# shellcheck disable=SC2086  # one log a run
python assets/parity/evals.py --results="$OUT/results.json" $logs > "$OUT/evals.md"
runs=$(for s in $SEEDS; do printf '%s,' "$RUNS/out-parity-${CONDITIONS%% *}-s$s"; done)  # the first design's runs
# shellcheck disable=SC2086  # each word a bar
parity_rules "${runs%,}" $RULES_BITS
# the first design's wall time: one run alone on one thread (the first seed again, in a folder of its own), evaluations
# included
# shellcheck disable=SC2046
timed_train timed parity-timed config/parity.py $(parity_design "${CONDITIONS%% *}") --seed="${SEEDS%% *}"
