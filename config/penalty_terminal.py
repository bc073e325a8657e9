# RMSNorm readout, terminal CE, plus the norm penalty lambda * sum_k mean ||H_k||^2 / d:
# the penalty makes the scale visible to the loss.
out_dir = 'out-penalty_terminal'
readout = 'norm'
loss = 'terminal'
norm_penalty = 0.01
