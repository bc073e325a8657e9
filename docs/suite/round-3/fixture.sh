#!/bin/bash
# Builds /tmp/r3fix: tiny parity and addition data folders, a tiny trained run on each (seconds on one core), and
# settle.py, the script of d11 and d12's snippets.
# Run from the repository root of an UNBROKEN copy:  bash docs/suite/round-3/fixture.sh
set -e
. /work/venv/bin/activate 2>/dev/null || true
export OMP_NUM_THREADS=1
F=/tmp/r3fix
rm -rf $F/data $F/parity $F/addition && mkdir -p $F/data
cat > $F/settle.py <<'PY'
# Run from the repository root: python /tmp/r3fix/settle.py held|loop
# settling (beyond.tasks) on a random window-2 model with a made-up state criterion that settles each string's
# positions at its own pace (row 0 two a loop, row 1 one a loop): prints the largest difference between
#  'held':  a settled position's state now and the state it had when it settled (0: held)
#  'loop':  an unsettled position's state and one loop of the model run on the whole of the previous state (0: the
#           window model computes the unsettled positions as the full pass would)
import os
import sys
sys.path.insert(0, os.getcwd())
import torch
from beyond.additions import FieldGPT, FieldGPTConfig
from beyond.tasks import settling, loop_step
torch.manual_seed(0)
m = FieldGPT(FieldGPTConfig(block_size=16, vocab_size=4, n_layer=1, n_head=1, n_embd=16, dropout=0.0, window=2,
                            positions='none', inject=True, interloop_norm=True, init_std=0.1)).eval()
x = torch.randint(0, 4, (2, 12))
pace = torch.tensor([2, 1])
def conf(new, old):  # 1 (settled) on the held columns and the next `pace` ones
    held = (new == old).all(-1).long().cumprod(1).sum(1)  # (B,): the held columns of what is computed
    return (torch.arange(new.size(1))[None, :] < (held + pace)[:, None]).float()
step = loop_step(m)
held_diff = loop_diff = 0.0
first_state = {}
prev = None
with torch.no_grad():
    for k, (h, lo) in enumerate(settling(m, x, 8, (conf, 0.5), step)):
        if prev is not None:
            full = step(prev, m.embed(x), k - 1)
            for b in range(2):
                for t in range(x.size(1)):
                    if t < prev_lo[b]:
                        first_state.setdefault((b, t), prev[b, t].clone())
                        held_diff = max(held_diff, (h[b, t] - first_state[b, t]).abs().max().item())
                    else:
                        loop_diff = max(loop_diff, (h[b, t] - full[b, t]).abs().max().item())
        prev, prev_lo = h, lo.clone()
what = sys.argv[1] if len(sys.argv) > 1 else 'held'
print(what, 'largest difference: %.3g' % (held_diff if what == 'held' else loop_diff))
PY
python -m beyond.parity --out_dir $F/data/parity --seed 5 --train_rows 256 --val_rows 32 --test_rows 32 --probe_rows 16 \
  --val_lengths 8 --test_lengths 8 --probe_lengths 12 >/dev/null
python -m beyond.addition --out_dir $F/data/addition --seed 5 --train_rows 256 --train_lengths 8 --val_rows 32 \
  --val_lengths 8 --test_rows 32 --test_lengths 8 --probe_rows 16 --probe_lengths 12 >/dev/null
for task in parity addition; do
  python train.py config/$task.py --data_dir=$F/data --out_dir=$F/$task --max_iters=6 --inits=1 --eval_interval=3 \
    --eval_iters=1 --log_interval=3 --batch_size=8 --max_loops=4 --n_loops=4 --warmup_iters=2 --n_embd=16 \
    --always_save_checkpoint=True --select= >/dev/null 2>&1
done
ls $F/parity $F/addition
