# Contractive injection with the RMSNorm readout, per-loop CE (Parcae's h <- A h + B e with A a
# contraction; OpenMythos; docs/depth.md): the released damping and the input injection together,
# h <- sigmoid(a) h + H_0 between loops, so the recurrence has a fixed point the state can settle at.
model_class = 'beyond.additions.FieldGPT'   # beyond the paper: the field's model additions (beyond/additions.py)
out_dir = 'out-contractive_perloop'
readout = 'norm'
loss = 'perloop'
damping = True
inject = True
