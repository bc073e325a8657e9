#!/usr/bin/env bash
# Depth that pays? (docs/tasks.md#the-design): running parity (python -m beyond.parity: train strings of 1-8 bits),
# the recipe of config/parity.py (window 2, no positions, injection, the progressive loss) with each design
# of CONDITIONS and each seed of SEEDS, two runs at once on one thread each, then every run scored by
# beyond.tasks at each test length and K.
#
#   bash assets/parity/designs/run.sh
#   CONDITIONS="norm-il norm" SEEDS="1 2 3" bash assets/parity/designs/run.sh
#
# Settings (environment variables; the defaults are the study as it was run; relative paths are from the
# repo root):
#   DATA_DIR     where beyond.parity writes the task (data); TASK_DATASET its folder there (parity)
#   PREP_ARGS    extra python -m beyond.parity settings (the CI's tiny sizes: fewer rows)
#   CONDITIONS   the designs trained, each READOUT[-il][-pen][-damp][-noinj][-fixed]: a --readout, with the
#                inter-loop norm (--interloop_norm=True, else False), the norm penalty (--norm_penalty=0.01),
#                damping (--damping=True), no injection (--inject=False), per-loop CE at a fixed K=12 instead
#                of the progressive loss (--random_depth=False), on top of config/parity.py
#                (norm-il norm raw raw-il norm-pen norm-damp alpha-il alpha norm-il-noinj norm-il-fixed)
#   SEEDS        the seeds (1 2 3)
#   RUNS         where the run folders out-parity-<design>-s<seed> go (the repo root)
#   OUT          where results.json, accuracy.md, accuracy.png and logs/ go
#                (a fresh out-study-tasks in RUNS, refused if it holds anything)
#   STORE        1: OUT is this folder, and the stored results the pages quote are written over
#   RULE         the checkpoint rule and training the study was run with: the best validation loss, evaluated every
#                250 steps, of one initialization at a cosine learning rate (--select= --eval_interval=250 --inits=1
#                --lr_decay=cosine; config/parity.py's own rule is its probe's, assets/parity/seeds)
#   TRAIN_ARGS   extra settings for every train.py run; TASK_ARGS for python -m beyond.tasks (the CI's tiny sizes)
set -euo pipefail
cd "$(dirname "$0")/../../.."
DATA_DIR=${DATA_DIR:-data} TASK_DATASET=${TASK_DATASET:-parity} PREP_ARGS=${PREP_ARGS:-}
CONDITIONS=${CONDITIONS:-norm-il norm raw raw-il norm-pen norm-damp alpha-il alpha norm-il-noinj norm-il-fixed} SEEDS=${SEEDS:-1 2 3} RUNS=${RUNS:-.}
RULE=${RULE:---select= --eval_interval=250 --inits=1 --lr_decay=cosine --max_iters=3000 --stop_score=-1} TRAIN_ARGS=${TRAIN_ARGS:-} TASK_ARGS=${TASK_ARGS:---lengths=8,16,32 --loops=4,8,12,16,24,32,48,64,96,128,256,512 --interventions=clamp,direction,cap}
DATASET=$TASK_DATASET
. assets/study.sh  # study_out, train
study_out parity/designs
mkdir -p "$OUT/logs"

[ -f "$DATA_DIR/$TASK_DATASET/meta.json" ] || python -m beyond.parity --out_dir "$DATA_DIR/$TASK_DATASET" $PREP_ARGS \
    > "$OUT/logs/prepare.log"
for c in $CONDITIONS; do parity_design "$c" > /dev/null; done  # a bad name stops here, before any training
for s in $SEEDS; do for c in $CONDITIONS; do  # (train_grid puts {c} in names and configs, not in settings)
  # shellcheck disable=SC2046  # parity_design's words are separate settings
  lane train "parity-$c-s$s" config/parity.py $(parity_design "$c") --seed="$s" $RULE
done; done
wait_lanes
runs=$(for s in $SEEDS; do for c in $CONDITIONS; do printf '%s,' "$RUNS/out-parity-$c-s$s"; done; done)
python -m beyond.tasks --runs="${runs%,}" --seed=1 --out="$OUT" $TASK_ARGS > "$OUT/accuracy.md"
