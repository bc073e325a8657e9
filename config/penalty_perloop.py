# RMSNorm readout, per-loop CE, plus the norm penalty lambda * sum_k mean ||H_k||^2 / d.
out_dir = 'out-penalty_perloop'
readout = 'norm'
loss = 'perloop'
norm_penalty = 0.01
