#!/bin/bash
# builds a tiny byte-level dataset and a 2-iteration checkpoint in /tmp/rvfix (once), from the repo root
set -e
export OMP_NUM_THREADS=1
F=/tmp/rvfix
if [ -f $F/out/ckpt.pt ]; then exit 0; fi
rm -rf $F; mkdir -p $F
python prepare.py --train_file README.md --val_file docs/depth.md --tokenizer bytes --out_dir $F/data/tiny --num_threads 1 >/dev/null 2>&1
python train.py config/raw_perloop.py config/cpu.py --data_dir=$F/data --dataset=tiny --out_dir=$F/out --max_iters=2 \
  --eval_interval=2 --n_embd=32 --n_head=2 --block_size=32 --batch_size=4 --eval_iters=2 --log_interval=1 --dtype=float32 >/dev/null 2>&1
