# Per-loop CE with raw readouts at loops 1..K-1 and an RMSNorm readout at the last loop:
# the intermediate losses see the scale that the final one cannot.
out_dir = 'out-finalnorm_perloop'
readout = 'final_norm'
loss = 'perloop'
