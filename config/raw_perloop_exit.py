# raw_perloop with exit-aware training: a quarter of the tokens exit after a random loop 1..K-1
# and are frozen there (their loss reads loops 1..e), so the model learns to read frozen
# neighbours, as a decoder with recomputed stand-ins shows them. 0.25 by measurement (4-epoch CPU
# demo, assets/cpu-long-exit-sweep): full depth costs +3.8% here, against +7.8% at 0.5.
# The exit-aware model is beyond/exit_train.py's (python -m beyond.exit_train trains it too).
model_class = 'beyond.exit_train.ExitTrainedGPT'   # beyond the paper: exit-aware training
out_dir = 'out-raw_perloop_exit'   # (the runs here name their folders with --out_dir)
readout = 'raw'
loss = 'perloop'
exit_train = 0.25
