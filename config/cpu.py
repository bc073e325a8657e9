# Overlay: any condition on a laptop CPU in a few minutes, on byte-level data.
#   python prepare.py --dataset wikitext-2 --tokenizer bytes
#   python train.py config/norm_perloop.py config/cpu.py
# A tiny model (2 shared layers, d=128, K=4 as in the paper) and a higher learning rate
# so that the drift shows within a few hundred steps.
out_dir = out_dir + '-cpu'
dataset = 'wikitext-2-bytes'
device = 'cpu'
compile = 'off'
n_layer = 2
n_head = 4
n_embd = 128
dropout = 0.0
block_size = 128
batch_size = 16
learning_rate = 3e-3
max_iters = 300
eval_interval = 50         # dense enough for the drift-over-training figure
eval_iters = 20
log_interval = 25
