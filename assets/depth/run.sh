#!/usr/bin/env bash
# Depth both ways (docs/depth.md): the CPU demo's 4-epoch training (config/cpu_long.py) of the paper's
# conditions and the field's scale controls, with a fixed K and with random depth (config/random_depth.py),
# each run evaluated on its own as soon as it is trained (K = 1..16, the clamp, Lemma 2 to 30 loops, the
# drift, calibrated exits), its results-<run>.json kept, and every stored part merged into tables.md.
# Runs go in lanes, two at a time with one thread each, so that a stop loses at most the runs in flight;
# a run whose results-<run>.json is stored is not trained again.
#
#   WT103=/path/to/wikitext-103 bash assets/depth/run.sh
#   RUNS_LIST="raw_perloop:rd:1 raw_perloop:rd:2" bash assets/depth/run.sh     # some of the runs
#
# Settings (environment variables; the defaults are the study as it was run; relative paths are from
# the repo root):
#   WT103        the folder with WikiText-103's wiki.valid.tokens and wiki.test.tokens (only to prepare the data)
#   DATA_DIR     prepare.py's output folder (data); DATASET the data set there (wt103-demo-bytes)
#   RUNS_LIST    the runs, each CONDITION:DEPTH:SEED with DEPTH 'fixed', 'rd' (random depth) or rd[SIGMA][mMEAN]
#                (random depth with depth_sigma SIGMA and mean K MEAN: rd1.5 is a heavier tail than rd's 1.0,
#                rdm8 draws a mean of 8 loops instead of the condition's 4), in order
#   LANES        how many runs train at once (2), each with OMP_NUM_THREADS=THREADS (1)
#   RUNS         where the run folders out-<condition>[-rd]-cpu-long-s<seed> go (the repo root)
#   OUT          where results-<run>.json, tables.md, the figures and logs/ go
#                (a fresh out-study-depth in RUNS, refused if it holds anything; name a stopped one as OUT to go on with it)
#   STORE        1: OUT is this folder, and the stored results the pages quote are written over
#   TRAIN_ARGS   extra settings for every train.py run; EVAL_ARGS (and DECODE_ARGS: its decoding flags) for python -m beyond.eval_decode (the CI's tiny sizes)
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA_DIR=${DATA_DIR:-data} DATASET=${DATASET:-wt103-demo-bytes}
RUNS_LIST=${RUNS_LIST:-raw_perloop:rd:1 norm_perloop:rd:1 raw_perloop:fixed:1 inject_perloop:rd:1 \
penalty_perloop:rd:1 damped_perloop:rd:1 sandwich_perloop:rd:1 alpha_perloop:rd:1 raw_perloop:rd:2 \
raw_perloop:rd:3 interloop_perloop:rd:1 sandwich_perloop:fixed:1 alpha_perloop:fixed:1 alpha_perloop:rd:2 \
damped_perloop:fixed:1 alpha_perloop:rd:3 penalty_perloop:rd:3 penalty_perloop:rd:2 inject_perloop:fixed:1 \
damped_perloop:rd:2 damped_perloop:rd:3 norm_perloop:fixed:1 interloop_perloop:fixed:1 penalty_perloop:fixed:1 \
raw_terminal:fixed:1 norm_terminal:fixed:1 finalnorm_perloop:fixed:1 penalty_terminal:fixed:1 norm_perloop:rd:2 \
norm_perloop:rd:3 alpha_perloop:rd1.5:1 raw_perloop:rd1.5:1 damped_perloop:rd1.5:1 penalty_perloop:rd1.5:1 \
contractive_perloop:rd:1 contractive_perloop:fixed:1 \
alpha_perloop:rdm8:1 damped_perloop:rdm8:1 \
penalty_terminal:rd:1 norm_terminal:rd:1 norm_terminal:rd:2 norm_terminal:rd:3}
LANES=${LANES:-2} THREADS=${THREADS:-1} RUNS=${RUNS:-.}
TRAIN_ARGS=${TRAIN_ARGS:-} EVAL_ARGS=${EVAL_ARGS:-} DECODE_ARGS=${DECODE_ARGS:-}
. assets/study.sh  # study_out, prepare_wt103, train, train_grid, lane
study_out depth
mkdir -p "$OUT/logs"

prepare_wt103 bytes

one() {  # one CONDITION:DEPTH:SEED: train it, evaluate it alone, keep its results
  IFS=: read -r c depth s <<< "$1"
  local name="$c-cpu-long-s$s" overlay=()
  case $depth in
    rd*) name="$c-$depth-cpu-long-s$s" overlay=(config/random_depth.py)  # rd[SIGMA][mMEAN]: rd, rd1.5, rdm8
         local spec=${depth#rd} sigma= mean=
         sigma=${spec%%m*}; [[ $spec == *m* ]] && mean=${spec#*m}
         [ -n "$sigma" ] && overlay+=("--depth_sigma=$sigma")
         [ -n "$mean" ] && overlay+=("--n_loops=$mean") ;;
  esac
  [ -f "$OUT/results-$name.json" ] && return
  OMP_NUM_THREADS=$THREADS train "$name" "config/$c.py" config/cpu.py config/cpu_long.py "${overlay[@]}" --seed="$s"
  OMP_NUM_THREADS=$THREADS python -m beyond.eval_decode "$RUNS/out-$name" --max_loops 16 --max_tokens 131072 --clamp \
      --lemma_loops 30 --curves --calibrate 0.01 --criteria max_prob,entropy --stand_in copy \
      --out "$RUNS/eval-depth-$name" $EVAL_ARGS $DECODE_ARGS > "$OUT/logs/$name.eval.log" 2>&1 \
      || { tail -n 20 "$OUT/logs/$name.eval.log" >&2; return 1; }
  cp "$RUNS/eval-depth-$name/results.json" "$OUT/results-$name.json"
}

lane() {  # lane I: the runs I, I+LANES, I+2 LANES, ... of RUNS_LIST, one after the other
  local i=0
  for r in $RUNS_LIST; do
    if [ $((i % LANES)) = "$1" ]; then one "$r"; fi
    i=$((i + 1))
  done
}

pids=()
for l in $(seq 0 $((LANES - 1))); do lane "$l" & pids+=($!); done
for p in "${pids[@]}"; do wait "$p"; done

# --- every stored part, merged: the tables and figures of all runs so far
parts=$(ls "$OUT"/results-*.json | paste -sd, -)
python -m beyond.eval_decode --from_results "$parts" --out "$OUT" > "$OUT/tables.md"
python -m beyond.depth_table "$OUT/results.json" > "$OUT/designs.md"

# --- the random-depth training step beside the fixed-K one, one step of each in turn (docs/depth.md);
# BENCH_ARGS: extra settings for beyond.bench (the CI's tiny sizes)
OMP_NUM_THREADS=$THREADS python -m beyond.bench config/raw_perloop.py config/cpu.py config/random_depth.py \
    --steps=60 --warmup=2 ${BENCH_ARGS:-} > "$OUT/logs/bench-random-depth.log"
