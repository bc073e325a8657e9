# AlphaReadout, per-loop CE (the paper's released code, models/refiner.py; docs/depth.md): the
# readout gamma(s) u with gamma(s) = s_ref^(1-alpha) s^alpha and alpha learned, from a normalized
# readout (alpha = 0) to the raw one (alpha = 1): how much of the scale the model chooses to see.
out_dir = 'out-alpha_perloop'
readout = 'alpha'
loss = 'perloop'
