# Overlay: the paper's own 44M recipe (d=512, 8 heads, 8 shared layers, K=4, released init,
# dropout 0.1, AdamW lr 3e-4, weight decay 0.01, clip 1.0, constant lr) on a 2-core CPU,
# on GPT-2 BPE tokens. Only the batch and the length change.
#   python prepare.py                                        # online: WikiText-103 -> data/wikitext-103
#   python train.py config/norm_perloop.py config/cpu_44m.py
# Offline, from WikiText-103's validation and test text (train on valid, validate on test):
#   python prepare.py --train_file $WT103/wiki.valid.tokens --val_file $WT103/wiki.test.tokens \
#       --tokenizer r50k_base --out_dir data/wt103-demo       # r50k_base = GPT-2's BPE ranks
#   python train.py config/norm_perloop.py config/cpu_44m.py --dataset=wt103-demo
# 200 iterations x 4 x 256 = 204,800 tokens: 0.04% of the paper's 4 epochs of WikiText-103
# (about 470M GPT-2 tokens), 0.8 of a pass over WikiText-103's validation text. 7-14 s an
# iteration with one thread each, two runs at once on 2 cores (bf16): 28-46 minutes a run.
# The norms drift within minutes; the language model is far from trained at this length
# (docs/paper-shape.md).
out_dir = out_dir + '-cpu44m'
device = 'cpu'
compile = 'off'
batch_size = 4
max_iters = 200
eval_interval = 20         # dense enough for the drift-over-training figure
eval_iters = 8             # 8 x 4 windows of the validation split per eval
log_interval = 5
