"""A plan sized in hours, GPU-hours, disk and host memory, and the plan-time checks of a GPU preset's job
shape, one module per question:

    throughput.py   what a GPU is assumed (or the pilot measured) to do a second: `Throughput`, `scenarios`
    step_model.py   the seconds and tokens of one training step, validation and preemption under it
    footprint.py    what a job holds: checkpoint volume on disk, host memory per node
    estimates.py    every job's hours, GPUs and checkpoint bytes (`estimate_jobs`)
    timeline.py     when the jobs would start and end on N nodes (`simulate`)
    report.py       the dry run's totals (`total_lines`), what branching saves, what a failure costs
    checks.py       plan-time errors of a GPU preset's job shape (`check_plan`)

    t = throughput(preset)                          # the expected assumption (or a pilot's measurement)
    est = estimate_jobs(preset, jobs, t)            # key -> Estimate (hours, GPUs, checkpoint bytes)
    print("\\n".join(total_lines(preset, jobs, est, t, cluster_nodes=16)))

Every figure rests on a named throughput (`Throughput`): assumed (throughput.py's defaults, the protocol's
keys, the driver's flags, a `bench.gpu_check` report), as a low / expected / high range (`scenarios`), or
measured by the pilot (`python reproduce/run_all.py --pilot`: runs/<preset>/pilot/pilot.json, `Measured`). The
step model:

  a generation call      = tokens / (R x GPUs) + tail; tail = (max_response − mean response) / D: the call
                           waits for its longest response, decoded alone at the end (D tokens/s: one sequence)
  on-policy tokens       = drawn prompts x (|G| − 1 with anchors, else |G|) x fill x max_response
  reference tokens       = anchor share x drawn prompts x ref_n x fill x max_response (ARMOR's lazy anchors:
                           the reference samples only prompts that pass, about 1.5 B of them; the paper's
                           "about 125 %" of the baseline's inference is every drawn prompt, share 1)
  trained tokens         = prompts_per_step x |G| x fill x (max_prompt + max_response) x epochs
                           x (1 + 1/4 per extra forward pass: old policy, πref, teacher)
  a step                 = its generation calls (one round; a second call for the anchors' reference samples)
                           + trained / (U x GPUs) + pushes x push_s (the policy after each update; with
                           anchors the reference in and out: 2)
  a train job            = trained steps x step + validations x (validation tokens / (R x GPUs) + tail)
                           + saves x save_s; a branch trains only the steps after its branch point
  an evaluate job        = checkpoints x Σ benchmarks ceil(chunks / GPUs) x (a chunk's problems x k x fill
                           x max_response / R + tail): a chunk (EvalSettings.chunk_size problems) is one
                           rank's generation call, so a benchmark of fewer chunks than GPUs leaves some idle;
                           past its time limit the job is requeued and resumes (its attempts named)
  a preemption costs     = schedule.state_every (else save_every) completed steps + the one in flight

R, U: generated and trained tokens/s per GPU; fill: mean response length / lengths.max_response, by default
from the paper's reported lengths (protocol.paper_response_tokens, its source named) or an assumed range.
Measured by the pilot, a step is the pilot's own (its batch is the paper's divided by the nodes, so each GPU
does a full-scale step's work), and saves, validations and evaluations take its measured seconds. Checkpoint
volume: `footprint.checkpoint_volume` (the one formula; πref's shards in a run that resets it); host memory:
`footprint.host_memory_gb` (the engine's weight backup, a step's rollouts at the range's high end, a state
save's CPU copy). The graph's cost and the budget's choice of items: reproduce/dag/budget.py.
"""
