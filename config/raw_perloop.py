# Raw readout, per-loop CE: the head sees H_k itself, so every loop's loss sees its scale.
out_dir = 'out-raw_perloop'
readout = 'raw'
loss = 'perloop'
