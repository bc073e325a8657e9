#!/usr/bin/env bash
# Every measurement a lent GPU should make, in one command (a few minutes on an H100/H200):
#
#     ./gpu_check.sh [OUT]        # OUT: the folder for logs and the short run (default gpu-check)
#
# 1. bench.py at the 44M and 129M shapes, compiled, with both readout loss paths (fused, plain):
#    tokens/s, MFU, peak memory, per-loop vs terminal CE;
# 2. a short train.py run (44M shape, compiled) on byte-level data made from this repository's
#    own text files (no network needed), logging ms/iter, MFU and peak memory;
# 3. decoding speed of that checkpoint with sample.py: fixed K eager and compiled, and speculative.
# STEPS=10 WARMUP=3 ITERS=200 override the lengths. Each step's output is in OUT/*.log; a step
# that fails is reported and the others still run. Needs CUDA: elsewhere it stops with one line.
set -uo pipefail
cd "$(dirname "$0")"
OUT=${1:-gpu-check}
STEPS=${STEPS:-10}
WARMUP=${WARMUP:-3}
ITERS=${ITERS:-200}
PY=${PYTHON:-python}

if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "gpu_check.sh: error: no CUDA GPU here (torch.cuda.is_available() is False); this script measures a GPU" >&2
    exit 1
fi
mkdir -p "$OUT"
failed=()
step() {  # step NAME COMMAND...: runs it, its output to the screen and OUT/NAME.log
    local name=$1; shift
    echo; echo "=== $name: $*"
    if ! "$@" 2>&1 | tee "$OUT/$name.log"; then failed+=("$name"); fi
}

"$PY" -c "import torch; print('torch', torch.__version__, '| CUDA', torch.version.cuda, '|', torch.cuda.get_device_name())" \
    | tee "$OUT/device.log"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv >> "$OUT/device.log" 2>&1 || true

# 1. the training step, both loss paths, both shapes
for shape in 44m 129m; do
    overlay=$([ "$shape" = 129m ] && echo config/129m.py)
    for path in fused plain; do
        step "bench-$shape-$path" "$PY" bench.py config/norm_perloop.py $overlay --compile=on --loss_path=$path \
            --steps="$STEPS" --warmup="$WARMUP"
    done
done

# 2. a short training run on tiny byte-level data (prepare.py, offline)
mkdir -p "$OUT/text"
cat ./*.py README.md > "$OUT/text/train.txt"
tail -c 200000 "$OUT/text/train.txt" > "$OUT/text/valid.txt"
step prepare "$PY" prepare.py --train_file "$OUT/text/train.txt" --val_file "$OUT/text/valid.txt" \
    --tokenizer bytes --out_dir "$OUT/data/tiny-bytes" --force
step train "$PY" train.py config/norm_perloop.py --data_dir="$OUT/data" --dataset=tiny-bytes \
    --out_dir="$OUT/run" --max_iters="$ITERS" --eval_interval="$ITERS" --eval_iters=5 --log_interval=20 --compile=on

# 3. decoding speed (tok_per_s), fixed K eager and compiled, and speculative with the first loop as draft
step sample "$PY" sample.py --out_dir="$OUT/run" --max_new_tokens=256 --num_samples=1
step sample-compiled "$PY" sample.py --out_dir="$OUT/run" --max_new_tokens=256 --num_samples=1 --compile=on
step sample-speculative "$PY" sample.py --out_dir="$OUT/run" --max_new_tokens=256 --num_samples=1 \
    --draft_loops=1 --draft_tokens=3 --temperature=1.0 --top_k=0
step sample-speculative-compiled "$PY" sample.py --out_dir="$OUT/run" --max_new_tokens=256 --num_samples=1 \
    --draft_loops=1 --draft_tokens=3 --temperature=1.0 --top_k=0 --compile=on

echo
echo "=== summary (logs in $OUT/)"
grep -h -A4 "^| loss " "$OUT"/bench-*.log 2>/dev/null | grep -v "^--" || true
grep -h "^iter $ITERS:" "$OUT/train.log" 2>/dev/null || true
grep -h "tok_per_s" "$OUT"/sample*.log 2>/dev/null || true
if [ ${#failed[@]} -gt 0 ]; then
    echo "gpu_check.sh: these steps failed: ${failed[*]} (see $OUT/<step>.log)" >&2
    exit 1
fi
