# RMSNorm readout, per-loop CE, and an RMSNorm on the state between loops: the recurrence
# carries no scale, so there is none to drift (the paper's scale-removing recurrence).
out_dir = 'out-interloop_perloop'
readout = 'norm'
loss = 'perloop'
interloop_norm = True
