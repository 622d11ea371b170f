"""The run folder's checkpoint layout, owned here (the trainer writes it; the harness and the driver read it).

    run_dir/checkpoints/step_000040/        a complete checkpoint: an HF folder + trainer_state.pt
    step_dir(run_dir, 40), list_checkpoints(run_dir) -> [20, 40], STEP_RE.match("step_000040")
The full layout of a run folder is docs/CONTRACTS.md's."""
from __future__ import annotations

import re
from pathlib import Path

STEP_RE = re.compile(r"^step_(\d{6,})$")
# written last but the manifest: its presence marks a whole checkpoint
STATE_FILE = "trainer_state.pt"


def step_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step_{step:06d}"


def list_checkpoints(run_dir: Path) -> list[int]:
    """The steps of the run's complete checkpoints (folders step_NNNNNN holding trainer_state.pt),
    ascending."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    steps = []
    for p in root.iterdir():
        m = STEP_RE.match(p.name)
        if m and (p / STATE_FILE).is_file():
            steps.append(int(m.group(1)))
    return sorted(steps)
