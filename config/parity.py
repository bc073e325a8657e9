# Running parity (docs/tasks.md): a task whose longer strings need more loops. The recommended recipe:
# bounded work per loop (a window of 2, no position embeddings: a loop moves the parity one bit on, and
# any length runs), input injection, the progressive loss (n ~ U[0, 12) loops without a graph, then
# k ~ U[1, 12 - n] with one, per-loop CE on those), the norm readout with the paper's inter-loop norm
# (the carried state at a fixed RMS, so the injected bits are not drowned as it grows), weights at
# std 0.1 (about 1/sqrt(d) at d=64), and the first checkpoint that extrapolates (its probe split's 48-bit strings,
# read every 50 steps past a screen of their first halves, then read fast, at 1.25 loops a bit, with 256-bit strings
# beside them: beyond.tasks.long_probe), over up to four initializations trained one after the other from scratch at
# a constant learning rate after warm-up (chances to come upon a checkpoint that extrapolates; the steps before it
# trained one, with a cosine: assets/parity/README.md, the recipe's log). Trains on strings of 1-8 bits
# (beyond.parity's default).
#   python -m beyond.parity
#   python train.py config/parity.py                                             # the recipe
#   python train.py config/parity.py --interloop_norm=False --out_dir=out-parity-norm   # its blind-spot twin
#   python -m beyond.tasks --runs=out-parity,out-parity-norm --lengths=8,16,32 --loops=8,12,16,32,64,128,256 --seed=1 --out=eval-parity
model_class = 'beyond.additions.FieldGPT'   # beyond the paper: the field's model additions (beyond/additions.py)
out_dir = 'out-parity'
dataset = 'parity'
device = 'cpu'
compile = 'off'
n_layer = 1
n_head = 1
n_embd = 64
dropout = 0.0
block_size = 9           # unused without position embeddings: any length runs
positions = 'none'
window = 2
readout = 'norm'
interloop_norm = True
inject = True
loss = 'perloop'
init_std = 0.1
random_depth = True
depth_draw = 'progressive'
max_loops = 12
n_loops = 12             # the K the validation loss is read at
batch_size = 64
dtype = 'float32'
learning_rate = 1e-3
warmup_iters = 100
lr_decay = 'constant'    # checkpoints that extrapolate come while the rate is high; as a cosine decays, a run settles
                         # on states that do not
max_iters = 6000
inits = 4                # initializations of max_iters / 4 = 1,500 steps, one after another ...
stop_score = 0.0         # ... the next only while no checkpoint passed every read of select's (below): the first that
                         # does is kept, and the run ends at it
eval_interval = 50
always_save_checkpoint = False  # keep the checkpoint that extrapolates best:
select = 'beyond.tasks.long_probe'  # the probe split's 48-bit strings at K=96 and 192 (every bit right at both), read
                                    # where their first 24 bits are right at K=48 and 96; past that, the probe's strings
                                    # and the long split's 256-bit ones at 1.25 and 2 loops a bit
eval_iters = 4
log_interval = 250
