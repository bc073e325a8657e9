#!/usr/bin/env bash
# The paper's 44M shape and recipe on a 2-core CPU: four per-loop conditions, 200 iterations of
# config/cpu_44m.py on GPT-2 BPE tokens (28-46 min a run, two at a time, one thread each), evaluated
# in parts (two evaluations at a time, one thread each) and merged, and the costs of a decoding step
# in float32 and bf16 (docs/paper-shape.md). The costs are timed: run that part on a quiet machine.
#
#   WT103=/path/to/wikitext-103 TIKTOKEN_CACHE_DIR=/path/to/tiktoken_cache bash assets/cpu-44m/run.sh
#
# Settings (environment variables; the defaults are the study as it was run; relative paths are
# from the repo root):
#   WT103        the folder with WikiText-103's wiki.valid.tokens and wiki.test.tokens (only to prepare the data;
#                offline, tiktoken reads r50k_base, GPT-2's BPE ranks, from TIKTOKEN_CACHE_DIR)
#   DATA_DIR     prepare.py's output folder (data); DATASET the data set there (wt103-demo)
#   CONDITIONS   the conditions trained, each a config/<condition>.py (one seed: train.py's default, 1337)
#   PARTS        the evaluations, part=condition,condition...; each part's results.json kept as results-<part>.json
#   COSTS        the runs whose decoding step is timed, run:dtype (norm_perloop:float32 norm_perloop:bfloat16
#                raw_perloop:float32); THREADS their threads (2)
#   RUNS         where the run folders out-<condition>-cpu44m-s1 and the parts' evaluations go (the repo root)
#   OUT          where results-<part>.json, tables.md, the costs, the figures and logs/ go
#                (a fresh out-study-cpu-44m in RUNS, refused if it holds anything)
#   STORE        1: OUT is this folder, and the stored results the pages quote are written over
#   TRAIN_ARGS, EVAL_ARGS, COST_ARGS   extra settings for train.py, python -m beyond.eval_decode, beyond.depth_costs (the CI's tiny sizes)
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA_DIR=${DATA_DIR:-data} DATASET=${DATASET:-wt103-demo}
CONDITIONS=${CONDITIONS:-norm_perloop raw_perloop penalty_perloop interloop_perloop}
PARTS=${PARTS:-a=norm_perloop,raw_perloop b1=penalty_perloop b2=interloop_perloop}
COSTS=${COSTS:-norm_perloop:float32 norm_perloop:bfloat16 raw_perloop:float32} THREADS=${THREADS:-2}
RUNS=${RUNS:-.}
TRAIN_ARGS=${TRAIN_ARGS:-} EVAL_ARGS=${EVAL_ARGS:-} COST_ARGS=${COST_ARGS:-}
. assets/study.sh  # study_out, prepare_wt103, train, train_grid, lane
study_out cpu-44m
mkdir -p "$OUT/logs"

# --- the data: WikiText-103's validation text to train on, its test text to validate, as GPT-2 BPE tokens
prepare_wt103 r50k_base

# --- training: two runs at a time, one thread each; a run's output in logs/<run>.log, its log.jsonl copied
for c in $CONDITIONS; do
  lane train "$c-cpu44m-s1" "config/$c.py" config/cpu_44m.py
done
wait_lanes

# --- evaluation, two parts at a time: the first 8,192 validation tokens at K = 1..8 (the radial fraction on
# 512 of them: its float64 readout is slow at 50,257 symbols), the clamp, Lemma 2 to 30 loops on 2,048
# tokens, the drift; then the parts merged
evaluate() {  # evaluate PART CONDITION,...
  local part=$1 runs=() c
  for c in ${2//,/ }; do runs+=("$RUNS/out-$c-cpu44m-s1"); done
  python -m beyond.eval_decode "${runs[@]}" --max_tokens 8192 --diag_tokens 512 --clamp --lemma_loops 30 --lemma_tokens 2048 \
      --curves --bench_iters 1 --out "$RUNS/eval44-$part" $EVAL_ARGS > /dev/null
  cp "$RUNS/eval44-$part/results.json" "$OUT/results-$part.json"
}
parts=()
for p in $PARTS; do
  lane evaluate "${p%%=*}" "${p#*=}"
  parts+=("$OUT/results-${p%%=*}.json")
done
wait_lanes
python -m beyond.eval_decode --from_results "$(IFS=,; echo "${parts[*]}")" --out "$OUT" > "$OUT/tables.md"

# --- the costs of a decoding step, one run after the other on a quiet machine
for r in $COSTS; do
  OMP_NUM_THREADS=$THREADS python -m beyond.depth_costs "$RUNS/out-${r%%:*}-cpu44m-s1" --dtype "${r#*:}" $COST_ARGS \
      > "$OUT/costs-${r%%:*}-${r#*:}.md"
done
