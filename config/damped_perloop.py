# Spectral damping with the RMSNorm readout, per-loop CE (the paper's released code,
# models/ar_looplm.py; docs/depth.md): the state carried into the next loop is scaled by a
# learned sigmoid(a) < 1, a contraction of the recurrence.
out_dir = 'out-damped_perloop'
readout = 'norm'
loss = 'perloop'
damping = True
