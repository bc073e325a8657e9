# penalty_perloop with exit-aware training (see config/raw_perloop_exit.py). 0.25 by measurement:
# full depth costs +1.7% on the 4-epoch CPU demo, against +4.6% at 0.5 (3 seeds each).
# The exit-aware model is beyond/exit_train.py's (python -m beyond.exit_train trains it too).
model_class = 'beyond.exit_train.ExitTrainedGPT'   # beyond the paper: exit-aware training
out_dir = 'out-penalty_perloop_exit'
readout = 'norm'
loss = 'perloop'
norm_penalty = 0.01
exit_train = 0.25
