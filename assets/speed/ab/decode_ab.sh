#!/usr/bin/env bash
# alternates the two commits, each config, REPS times; one thread
. /work/main/.venv/bin/activate
export OMP_NUM_THREADS=2
for rep in 1 2 3; do
  for cfg in "demo eager 100" "m44 eager 60" "demo compiled 100" "m44 compiled 60"; do
    for root in /work/old28 /work/main; do
      [ "$rep" = 3 ] && [[ "$cfg" == *compiled* ]] && continue
      echo "$root $(TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$rep-$(basename $root) python /work/runs/decode_ab.py $root $cfg 2>&1 | grep RESULT)"
    done
  done
done
