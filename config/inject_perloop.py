# Input injection with the RMSNorm readout, per-loop CE (Huginn, Parcae; docs/depth.md): the
# embedding H_0 is added to the input of every loop after the first.
out_dir = 'out-inject_perloop'
readout = 'norm'
loss = 'perloop'
inject = True
