"""What runs, in which order: the job graph of a preset (graph.py: world | fetch -> stage 1 -> θ* ->
stage 2 -> evaluation -> collect -> figures, as slurm.launcher Jobs), each job kind's resources
(resources.py), and what a budget of GPU-hours covers (budget.py). The job bodies are reproduce/jobs/."""
