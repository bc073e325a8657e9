#!/usr/bin/env bash
# Four epochs, the other four conditions (norm_terminal, raw_terminal, penalty_terminal,
# interloop_perloop) x 3 seeds, trained as assets/cpu-long's (config/cpu_long.py), evaluated one
# part at a time (seed 1 in two halves, a and b; seeds 2 and 3 one evaluation each) and merged
# (docs/four-epochs.md).
#
#   WT103=/path/to/wikitext-103 bash assets/cpu-long-more/run.sh
#
# Settings (environment variables; the defaults are the study as it was run; relative paths are
# from the repo root):
#   WT103        the folder with WikiText-103's wiki.valid.tokens and wiki.test.tokens (only to prepare the data)
#   DATA_DIR     prepare.py's output folder (data); DATASET the data set there (wt103-demo-bytes)
#   CONDITIONS   the conditions trained, each a config/<condition>.py; SEEDS the seeds (1 2 3)
#   RUNS         where the run folders out-<condition>-cpu-long-s<seed> and the parts' evaluations go (the repo root)
#   OUT          where results-<part>.json, tables.md, the figures and logs/ go
#                (a fresh out-study-cpu-long-more in RUNS, refused if it holds anything)
#   STORE        1: OUT is this folder, and the stored results the pages quote are written over
#   TRAIN_ARGS   extra settings for every train.py run; EVAL_ARGS for python -m beyond.eval_decode (the CI's tiny sizes)
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA_DIR=${DATA_DIR:-data} DATASET=${DATASET:-wt103-demo-bytes}
CONDITIONS=${CONDITIONS:-norm_terminal raw_terminal penalty_terminal interloop_perloop}
SEEDS=${SEEDS:-1 2 3} RUNS=${RUNS:-.}
TRAIN_ARGS=${TRAIN_ARGS:-} EVAL_ARGS=${EVAL_ARGS:-}
. assets/study.sh  # study_out, prepare_wt103, train, train_grid, lane
study_out cpu-long-more
mkdir -p "$OUT/logs"

# --- the data: the CPU demo's (WikiText-103's validation text to train on, its test text to validate)
prepare_wt103 bytes

# --- training, one run after the other; a run's output in logs/<run>.log, its log.jsonl copied
train_grid '{c}-cpu-long-s{s}' 'config/{c}.py' config/cpu.py config/cpu_long.py

# --- evaluation, a part at a time (K = 1..8 on the first 131,072 validation bytes, the clamp, Lemma 2 to
# 30 loops, the drift), each part's results.json kept as results-<part>.json; then the parts merged
evaluate() {  # evaluate PART RUN...
  local part=$1; shift
  python -m beyond.eval_decode "$@" --max_tokens 131072 --clamp --lemma_loops 30 --curves --out "$RUNS/eval-more-$part" \
      $EVAL_ARGS > /dev/null
  cp "$RUNS/eval-more-$part/results.json" "$OUT/results-$part.json"
}
parts=()
for s in $SEEDS; do
  runs=()
  for c in $CONDITIONS; do runs+=("$RUNS/out-$c-cpu-long-s$s"); done
  if [ "$s" = 1 ]; then  # seed 1 as two evaluations, a and b, of half its runs each
    half=$(( (${#runs[@]} + 1) / 2 ))
    evaluate a "${runs[@]:0:$half}"
    evaluate b "${runs[@]:$half}"
    parts+=("$OUT/results-a.json" "$OUT/results-b.json")
  else
    evaluate "s$s" "${runs[@]}"
    parts+=("$OUT/results-s$s.json")
  fi
done
python -m beyond.eval_decode --from_results "$(IFS=,; echo "${parts[*]}")" --out "$OUT" > "$OUT/tables.md"
