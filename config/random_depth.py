# Overlay on any condition: random-depth training (docs/depth.md). Each iteration draws its K,
# 1 + Poisson(lambda) with lambda log-normal of mean n_loops - 1 (mean K = n_loops), at most
# max_loops; the loss is every loop's CE as the condition's, over the loops run.
#   python train.py config/raw_perloop.py config/random_depth.py
#   python train.py config/raw_perloop.py config/cpu.py config/cpu_long.py config/random_depth.py
out_dir = out_dir + '-rd'
random_depth = True
depth_sigma = 0.5
max_loops = 16
bptt = 0
