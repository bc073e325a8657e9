# Binary addition (docs/tasks.md, the second task): the parity recipe (config/parity.py) with what the task changes.
# Trained on additions of at most 16 bits (beyond.addition's default), half of each split's strings a carry the whole
# length: a carry can have to travel 16 positions, so the loops drawn go to 24 (1.5 x 16, as parity's 12 is 1.5 x 8);
# a row holds the start token, the operands' bits and the carry-out position (18 tokens); everything else is parity's:
# a window of 2 and no position embeddings (a loop carries the carry one position on, any length runs), input
# injection, the progressive loss, the norm readout with the inter-loop norm, weights at std 0.1, and the first
# checkpoint that passes every read of parity's select (beyond.tasks.long_probe: the probe split's 96-bit additions, 97
# positions with the carry out, at K=194 and 388 past a screen; then those and the long split's 256-bit ones at 1.25
# and 2 loops a position; read every 100 steps where parity's are read every 50: each read costs about 8x).
# Initializations of 3,000 steps, one after another until a checkpoint passes (stop_score = 0; the run ends at it), at
# most four: on ten seeds with one (4301-4310, assets/addition) five kept a checkpoint past the screen and each of them
# was exact on 1,024-bit additions; the five that never passed it were exact on none, whatever their loss; with
# retries and the screened probe alone eight of ten new seeds were (assets/addition/retries: two that passed the probe
# were slow or approximate, which the reach read is for; assets/addition/reach: ten new seeds with it).
#   python -m beyond.addition
#   python train.py config/addition.py
#   python -m beyond.tasks --runs=out-addition --lengths=64,1024 --loops=64,128,256,512,1024,1536 --halt=latent --out=eval-addition
model_class = 'beyond.additions.FieldGPT'
out_dir = 'out-addition'
dataset = 'addition'
device = 'cpu'
compile = 'off'
n_layer = 1
n_head = 1
n_embd = 64
dropout = 0.0
block_size = 18          # unused without position embeddings: any length runs
positions = 'none'
window = 2
readout = 'norm'
interloop_norm = True
inject = True
loss = 'perloop'
init_std = 0.1
random_depth = True
depth_draw = 'progressive'
max_loops = 24
n_loops = 24             # the K the validation loss is read at
batch_size = 64
dtype = 'float32'
learning_rate = 1e-3
warmup_iters = 100
lr_decay = 'constant'
max_iters = 12000        # four initializations of 3,000 steps ...
inits = 4
stop_score = 0.0         # ... the next only while no checkpoint read every probe string right (above)
eval_interval = 100
always_save_checkpoint = False
select = 'beyond.tasks.long_probe'
eval_iters = 4
log_interval = 250
