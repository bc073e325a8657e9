# penalty_perloop with exit-aware training (see config/raw_perloop_exit.py; 0.5 is a guess).
out_dir = 'out-penalty_perloop_exit'
readout = 'norm'
loss = 'perloop'
norm_penalty = 0.01
exit_train = 0.5
