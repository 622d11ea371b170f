"""What each job of the matrix does (the bodies behind `python -m reproduce.jobs SUBCOMMAND`): train one run
(train.py), choose θ* / the late start / the restart point (peaks.py), evaluate the chosen checkpoints
(evaluate.py), measure the noise floor (noise.py), collect the results table (collect.py), draw the figures
(figures.py), wait for a checkpoint (wait.py). Each module is one job kind: its body, its inputs and its
`done` check."""
