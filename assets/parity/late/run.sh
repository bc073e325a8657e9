#!/usr/bin/env bash
# Late-state CE on every seed? (assets/parity/README.md, the log): config/parity.py's recipe with late-state CE, whose
# loops also learn to hold an answer (norm-il-late), on the seeds, data and test strings of assets/parity/seeds.
#
#   bash assets/parity/late/run.sh
#
# The study ran at commit 15f14ef (AT), where this folder was assets/parity-late (WAS). Late-state CE was a fix tried
# and not adopted, and its settings left train.py after it, so the study reruns only at that commit: this script trains
# nothing. It prints the commands that rerun it there, with the variables it was given (that commit's
# assets/parity-seeds/run.sh, its seed study then, reads them), and exits 0.
set -euo pipefail
AT=15f14ef WAS=assets/parity-late
given=''
keep() { if [ -n "$2" ]; then given+="$1=${2@Q} "; fi; }
keep DATA_DIR "${DATA_DIR:-}"; keep TASK_DATASET "${TASK_DATASET:-}"; keep PREP_ARGS "${PREP_ARGS:-}"
keep CONDITIONS "${CONDITIONS:-}"; keep SEEDS "${SEEDS:-}"; keep TEST_SEED "${TEST_SEED:-}"; keep RUNS "${RUNS:-}"
keep OUT "${OUT:-}"; keep TRAIN_ARGS "${TRAIN_ARGS:-}"; keep TASK_ARGS "${TASK_ARGS:-}"; keep LOOPS "${LOOPS:-}"
cat <<END
assets/parity/late ran at commit $AT, as $WAS; late-state CE left train.py after it, so the study reruns only there
(relative paths from that checkout's root). From this repository's root:
    git worktree add ../parity-late-$AT $AT
    cd ../parity-late-$AT && ${given}bash $WAS/run.sh
Without OUT, that commit's run.sh writes over its own checkout's $WAS (it reads no STORE): \`git diff\`
there compares the rerun with the stored results, and this checkout's assets/ stay as they are.
END
