# Raw readout, terminal CE: only the last loop is supervised, and its loss sees the scale.
out_dir = 'out-raw_terminal'
readout = 'raw'
loss = 'terminal'
