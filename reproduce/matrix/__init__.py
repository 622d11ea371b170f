"""Which arms run, with which config: a preset's protocol (protocol.py), the preset as the driver reads it and
where its runs live (presets.py), the arms of every figure and table (arms.py), the checkpoints each run
keeps (retention.py) and the full override list of one run (overrides.py)."""
