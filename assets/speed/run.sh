#!/usr/bin/env bash
# Training speed on a CPU: our training step beside the paper's released code's, at the 44M shape and
# the CPU demo's; peak memory, per-loop against terminal CE; and bf16 against float32 trained
# (docs/speed.md, speed.md and old-speed.md here). The timings want a quiet machine.
#
#   ANCHOR=/path/to/readout-blind-spot WT103=/path/to/wikitext-103 bash assets/speed/run.sh
#
# Settings (environment variables; the defaults are the study as it was run; relative paths are
# from the repo root):
#   ANCHOR       your clone of github.com/Rituraj003/readout-blind-spot, timed beside ours (empty: ours only)
#   WT103        the folder with WikiText-103's wiki.valid.tokens and wiki.test.tokens (only to prepare the data)
#   DATA_DIR     prepare.py's output folder (data); DATASET the data set there (wt103-demo-bytes)
#   CONDITIONS   the conditions trained in both precisions; SEED their seed (1)
#   RUNS         where the run folders out-<condition>-cpu-s<seed>-<dtype> are written (the repo root)
#   OUT          where logs/ goes
#                (a fresh out-study-speed in RUNS, refused if it holds anything)
#   STORE        1: OUT is this folder, and the stored results the pages quote are written over
#   BENCH_ARGS   extra settings for beyond.bench; TRAIN_ARGS for train.py; PARTS_ARGS for parts.py (the CI's tiny sizes)
#   COMPILED     1: also time the step compiled by the CPU inductor (minutes of compiling at 44M); 0: not
set -euo pipefail
cd "$(dirname "$0")/../.."
ANCHOR=${ANCHOR:-} DATA_DIR=${DATA_DIR:-data} DATASET=${DATASET:-wt103-demo-bytes}
CONDITIONS=${CONDITIONS:-norm_perloop raw_perloop} SEED=${SEED:-1} RUNS=${RUNS:-.}
BENCH_ARGS=${BENCH_ARGS:-} TRAIN_ARGS=${TRAIN_ARGS:-} PARTS_ARGS=${PARTS_ARGS:-} COMPILED=${COMPILED:-1}
. assets/study.sh  # study_out, prepare_wt103, train, train_grid, lane
study_out speed
mkdir -p "$OUT/logs"

# --- our step beside the released code's (docs/speed.md, "Against the paper's released code")
M44="config/norm_perloop.py --device=cpu --batch_size=2 --block_size=256 --vocab_size=50257"
anchor=${ANCHOR:+--anchor=$ANCHOR}
python -m beyond.bench $M44 --steps=3 --warmup=1 $anchor $BENCH_ARGS > "$OUT/logs/bench-44m.log"
python -m beyond.bench config/norm_perloop.py config/cpu.py --steps=20 --warmup=3 $anchor $BENCH_ARGS \
    > "$OUT/logs/bench-demo.log"

# --- where a step's time goes beyond its matmuls (roofline.md): each step's share of the measured matmul
# peak and its profile at 44M in bf16 and float32 (and their peak memory, per-loop against terminal CE) and at
# the demo's shape, compiled at 44M, and the parts alone
python -m beyond.bench $M44 --steps=5 --warmup=2 --profile=True $BENCH_ARGS > "$OUT/logs/profile-44m-bf16.log"
python -m beyond.bench $M44 --steps=5 --warmup=2 --profile=True --dtype=float32 $BENCH_ARGS > "$OUT/logs/profile-44m-float32.log"
python -m beyond.bench config/norm_perloop.py config/cpu.py --steps=20 --warmup=3 --profile=True $BENCH_ARGS \
    > "$OUT/logs/profile-demo.log"
# the casts of one bf16 step (counted, not timed)
python -m beyond.bench $M44 --steps=1 --warmup=0 --casts=True $BENCH_ARGS > "$OUT/logs/casts-44m-bf16.log"
# a CPU without native bf16, emulated on this one (roofline.md): oneDNN held to AVX-512 without its BF16
# instructions (where dtype 'auto' picks float32), each dtype; and held to AVX2 with MKL and ATen, float32
NO_BF16=(env ONEDNN_MAX_CPU_ISA=AVX512_CORE) AVX2=(env ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 ATEN_CPU_CAPABILITY=avx2)
for dtype in float32 bfloat16; do
  "${NO_BF16[@]}" python -m beyond.bench $M44 --steps=3 --warmup=1 --dtype=$dtype $BENCH_ARGS > "$OUT/logs/bench-44m-nobf16-$dtype.log"
done
"${AVX2[@]}" python -m beyond.bench $M44 --steps=3 --warmup=1 --dtype=float32 $BENCH_ARGS > "$OUT/logs/bench-44m-avx2-float32.log"
if [ "$COMPILED" = 1 ]; then
  python -m beyond.bench $M44 --steps=3 --warmup=1 --compile=on $BENCH_ARGS > "$OUT/logs/bench-44m-compiled.log"
fi
python assets/speed/parts.py $PARTS_ARGS > "$OUT/logs/parts.log"

# --- bf16 and float32 train the same picture (old-speed.md): each run's last eval line in logs/<run>.log
prepare_wt103 bytes
for c in $CONDITIONS; do
  for dtype in bfloat16 float32; do
    train "$c-cpu-s$SEED-$dtype" "config/$c.py" config/cpu.py --seed="$SEED" --dtype=$dtype
  done
done
