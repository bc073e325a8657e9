# Sandwich norm with the RMSNorm readout, per-loop CE (Huginn, Ouro; docs/depth.md): each
# sublayer's output is normalized before it is added to the stream, so every update has a
# bounded size; the readout still cannot see the state's scale.
model_class = 'beyond.additions.FieldGPT'   # beyond the paper: the field's model additions (beyond/additions.py)
out_dir = 'out-sandwich_perloop'
readout = 'norm'
loss = 'perloop'
sandwich_norm = True
