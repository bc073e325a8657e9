# RMSNorm readout, terminal CE, plus the norm penalty lambda * the mean over the K loops of
# mean ||H_k||^2 / d (every loop, as the paper's released script; the paper writes a sum):
# the penalty makes the scale visible to the loss.
out_dir = 'out-penalty_terminal'
readout = 'norm'
loss = 'terminal'
norm_penalty = 0.01
