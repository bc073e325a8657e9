#!/usr/bin/env bash
# issue 31 before/after: beyond.bench at the starting commit (c11f608, /work/old) and with this session's
# changes (/work/main), in turn, twice; 44M bf16 eager, 44M float32 eager, the demo shape
. /work/main/.venv/bin/activate
export OMP_NUM_THREADS=2
M44="config/norm_perloop.py --device=cpu --batch_size=2 --block_size=256 --vocab_size=50257 --steps=3 --warmup=1"
for rep in 1 2; do
  for args in "$M44" "$M44 --dtype=float32" "config/norm_perloop.py config/cpu.py --steps=20 --warmup=3 --vocab_size=256"; do
    for root in /work/old /work/main; do
      echo "$root $args"
      (cd $root && python -m beyond.bench $args 2>&1 | grep -E "^\| (perloop|terminal)|matmul peak")
    done
  done
done
