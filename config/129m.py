# Overlay: the paper's 129M shape (d=768, 12 heads, 12 layers in the shared stack, batch 32).
#   python train.py config/raw_perloop.py config/129m.py
out_dir = out_dir + '-129m'
n_layer = 12
n_head = 12
n_embd = 768
batch_size = 32
