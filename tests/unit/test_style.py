"""Lines of the repository's Python files are at most 110 columns (the developers' guide)."""
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 110
SKIP = {".venv", ".venv-vllm", "runs", ".git", "node_modules"}
# (file, how the stripped line begins): lines inside script-template strings a test writes out verbatim;
# wrapping them would change the script
ALLOW = {("tests/integration/test_experiments.py", 'f.write(json.dumps({{"step": s, "reward_mean"'),
         ("tests/integration/test_experiments.py", 'ap.add_argument("--checkpoint"); ap.add_argument('),
         ("tests/integration/test_experiments.py", '{"benchmark": b, "metrics": {"avg@4": 0.25, "pass@'),
         ("tests/integration/test_launcher.py", 'jobs.append(Job(f"count/{{i}}", [sys.executable, {')}


def test_python_lines_are_at_most_110_columns():
    long = []
    files = []
    for d, dirs, names in os.walk(ROOT):
        dirs[:] = [x for x in dirs if x not in SKIP and not x.startswith(".")]   # never walk a venv
        files += [Path(d) / n for n in names if n.endswith(".py")]
    for f in sorted(files):
        rel = f.relative_to(ROOT)
        for i, line in enumerate(f.read_text().splitlines(), 1):
            allowed = any(str(rel) == f and line.strip().startswith(b) for f, b in ALLOW)
            if len(line) > LIMIT and not allowed:
                long.append(f"{rel}:{i}: {len(line)} columns")
    assert not long, "\n".join(long)


def test_test_modules_have_unique_basenames():
    # pytest's default import mode puts each test folder on sys.path (no __init__.py): two test files of one
    # name in two folders stop the whole collection ("import file mismatch"), as CI did at 308326c
    seen = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"test modules sharing a name: {clashes}"
