#!/bin/bash
# Builds /tmp/r2fix: a tiny byte-level dataset and a tiny trained run (seconds on one core).
# Run from the repository root of an UNBROKEN copy:  bash docs/suite/round-2/fixture.sh
set -e
. /work/venv/bin/activate 2>/dev/null || true
export OMP_NUM_THREADS=1
F=/tmp/r2fix
rm -rf $F && mkdir -p $F/text
python - <<'PY'
import random
random.seed(0)
words = 'the tower was built of stone and iron in a year when the river rose over the old town walls'.split()
for name, n in (('train.txt', 3000), ('valid.txt', 600)):
    with open(f'/tmp/r2fix/text/{name}', 'w') as f:
        for _ in range(n // 10):
            f.write(' '.join(random.choice(words) for _ in range(10)) + '\n')
PY
python prepare.py --train_file $F/text/train.txt --val_file $F/text/valid.txt --tokenizer bytes --out_dir $F/data/tiny --num_threads 1 >/dev/null 2>&1
python train.py --data_dir=$F/data --dataset=tiny --out_dir=$F/run --device=cpu --compile=off --dtype=float32 \
  --n_layer=1 --n_head=2 --n_embd=32 --block_size=32 --batch_size=4 --dropout=0.0 --max_iters=4 \
  --eval_interval=2 --eval_iters=2 --log_interval=2 --learning_rate=3e-3 --readout=raw >/dev/null 2>&1
ls $F/run
