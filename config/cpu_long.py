# Overlay on config/cpu.py: the CPU demo trained for 4 epochs of its text, as the paper
# trains for 4 epochs (the quick demo's 300 iterations see about half an epoch).
#   python train.py config/raw_perloop.py config/cpu.py config/cpu_long.py
# About 2,200 iterations on WikiText-103's validation text as training data: ~11 min a run here.
out_dir = out_dir + '-long'
max_iters = 0            # derived from the data: epochs x train tokens / tokens per iteration
epochs = 4.0
eval_interval = 250
