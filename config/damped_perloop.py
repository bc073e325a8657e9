# Spectral damping with the RMSNorm readout, per-loop CE (the paper's released code,
# models/ar_looplm.py; docs/depth.md): the state carried into the next loop is scaled by a
# learned sigmoid(a) < 1, a contraction of the recurrence.
model_class = 'beyond.additions.FieldGPT'   # beyond the paper: the field's model additions (beyond/additions.py)
out_dir = 'out-damped_perloop'
readout = 'norm'
loss = 'perloop'
damping = True
