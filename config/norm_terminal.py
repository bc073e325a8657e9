# RMSNorm readout, terminal CE: only the last loop is supervised, through a scale-invariant readout.
out_dir = 'out-norm_terminal'
readout = 'norm'
loss = 'terminal'
