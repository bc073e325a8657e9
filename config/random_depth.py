# Overlay on any condition: random-depth training (docs/depth.md). Each iteration draws its K,
# 1 + Poisson(lambda) with lambda log-normal of mean n_loops - 1 (mean K = n_loops), at most
# max_loops; the loss is the condition's, over the last bptt loops run (truncated backprop).
# sigma 1 (Huginn's 0.5 at its mean of 32): at a mean of 4, a tail that reaches 16 loops;
# bptt 8 keeps a deep draw's backward as short as a shallow one's.
#   python train.py config/raw_perloop.py config/random_depth.py
#   python train.py config/raw_perloop.py config/cpu.py config/cpu_long.py config/random_depth.py
out_dir = out_dir + '-rd'
if model_class == 'model.LoopedGPT':  # truncated backprop (bptt) is beyond/additions.py's, whose model is the paper's with it
    model_class = 'beyond.additions.FieldGPT'
random_depth = True
depth_sigma = 1.0
max_loops = 32
bptt = 8
