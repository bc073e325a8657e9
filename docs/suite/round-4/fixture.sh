#!/usr/bin/env bash
# Round 4's fixture: run from the repository root of an unbroken copy; builds /tmp/r4fix in seconds on one core.
#   /tmp/r4fix/data/tiny     byte-level data (prepare.py) from seeded synthetic text: train and val splits
#   /tmp/r4fix/data/padded   a copy of it whose train.bin has one token more than meta.json records
#   /tmp/r4fix/run           a tiny raw_perloop run (train.py, 6 iterations, K=3, d=16, one layer)
set -euo pipefail
export OMP_NUM_THREADS=1
F=/tmp/r4fix
rm -rf "$F"
mkdir -p "$F/text"
python - <<'PY'
import numpy as np
rng = np.random.default_rng(4)
words = ('the loop reads its state and carries it on while the norm grows and the readout cannot see '
         'it a model of bytes learns which letter comes next from every one before').split()
for name, n in (('train', 3000), ('val', 800)):
    lines = [' '.join(rng.choice(words, size=12)) + ' .\n' for _ in range(n // 12)]
    open(f'/tmp/r4fix/text/{name}.txt', 'w').write(''.join(lines))
PY
python prepare.py --train_file "$F/text/train.txt" --val_file "$F/text/val.txt" --tokenizer bytes \
    --out_dir "$F/data/tiny" --num_threads 1 > /dev/null 2>&1
cp -r "$F/data/tiny" "$F/data/padded"
printf '\0\0' >> "$F/data/padded/train.bin"   # one uint16 token past what meta.json records
python train.py --data_dir="$F/data" --dataset=tiny --out_dir="$F/run" --device=cpu --compile=off --dtype=float32 \
    --n_layer=1 --n_head=2 --n_embd=16 --block_size=32 --batch_size=8 --n_loops=3 --readout=raw --dropout=0.0 \
    --max_iters=6 --eval_interval=3 --eval_iters=2 --log_interval=2 --diag_tokens=64 > "$F/train.log" 2>&1
echo "built $F"
