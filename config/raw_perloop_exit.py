# raw_perloop with exit-aware training: a quarter of the tokens exit after a random loop 1..K-1
# and are frozen there (their loss reads loops 1..e), so the model learns to read frozen
# neighbours, as a decoder with recomputed stand-ins shows them. 0.25 by measurement (4-epoch CPU
# demo, assets/cpu-long-exit-sweep): full depth costs +3.8% here, against +7.8% at 0.5.
# Trained by python -m beyond.exit_train (train.py with the exit-aware model class), not train.py.
out_dir = 'out-raw_perloop_exit'   # (the runs here name their folders with --out_dir)
readout = 'raw'
loss = 'perloop'
exit_train = 0.25
