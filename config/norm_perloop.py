# RMSNorm readout, per-loop CE: the blind spot. Every loop's loss is scale-invariant,
# so nothing controls ||H_k|| and the recurrence grows it.
out_dir = 'out-norm_perloop'
readout = 'norm'
loss = 'perloop'
