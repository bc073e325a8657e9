# raw_perloop with exit-aware training: half the tokens exit after a random loop 1..K-1 and are
# frozen there (their loss reads loops 1..e), so the model learns to read frozen neighbours, as
# a decoder with recomputed stand-ins shows them. 0.5 is a guess, not a tuned value.
out_dir = 'out-raw_perloop_exit'
readout = 'raw'
loss = 'perloop'
exit_train = 0.5
