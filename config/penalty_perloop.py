# RMSNorm readout, per-loop CE, plus the norm penalty lambda * the mean over the K loops of
# mean ||H_k||^2 / d (as the paper's released script; the paper writes a sum over loops).
out_dir = 'out-penalty_perloop'
readout = 'norm'
loss = 'perloop'
norm_penalty = 0.01
