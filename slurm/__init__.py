"""SLURM and local job launching: cluster scripts, submitit launcher, job wrapper, warm forks.

Generic: jobs are command lines with resources given as data; the driver that uses it (reproduce/) says what
its jobs are, which resources each kind gets and which modules warm starts import. Importing it sets nothing;
the job wrapper pins the CPU numerics where a job starts (common/cpu_numerics.py)."""
