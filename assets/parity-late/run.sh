#!/usr/bin/env bash
# Late-state CE on every seed? (docs/tasks.md#late-state-ce): config/parity.py's recipe with late-state CE, whose
# loops also learn to hold an answer (norm-il-late), on the seeds, data and test strings of assets/parity-seeds, where
# the recipe without it was run: its share of seeds passing each bar, its checkpoint rules, and its wall time alone.
#
#   bash assets/parity-late/run.sh
#
# assets/parity-seeds/run.sh with this folder's defaults: CONDITIONS (norm-il-late), OUT (this folder), and an
# evaluation every 100 steps with the probe read whole (as this study was run) before TRAIN_ARGS; every other setting of
# that script passes through.
set -euo pipefail
cd "$(dirname "$0")/../.."
CONDITIONS=${CONDITIONS:-norm-il-late} OUT=${OUT:-assets/parity-late} TRAIN_ARGS="--eval_interval=100 --select=beyond.tasks.probe --inits=1 --lr_decay=cosine ${TRAIN_ARGS:-}" \
    bash assets/parity-seeds/run.sh
