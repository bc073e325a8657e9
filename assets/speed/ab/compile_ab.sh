#!/usr/bin/env bash
. /work/main/.venv/bin/activate
export OMP_NUM_THREADS=2
for rep in 1; do
  for how in whole loop; do
    d=$(mktemp -d /tmp/ind-XXXX)
    echo "$how $(TORCHINDUCTOR_CACHE_DIR=$d python /work/runs/compile_ab.py /work/main 4 $how 2>&1 | grep -E 'RESULT|Error' | tail -1)"
  done
done
