# Input injection with the RMSNorm readout, per-loop CE (Huginn, Parcae; docs/depth.md): the
# embedding H_0 is added to the input of every loop after the first.
model_class = 'beyond.additions.FieldGPT'   # beyond the paper: the field's model additions (beyond/additions.py)
out_dir = 'out-inject_perloop'
readout = 'norm'
loss = 'perloop'
inject = True
