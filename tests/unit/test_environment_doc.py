"""docs/environment.md lists every environment variable the code reads or sets for its jobs, once, and no
other: a variable added to the code without a row there, or a row left for a variable the code dropped, fails
here. A listed variable counts as used where its name appears as a word in any code file (the variables a
tool reads from a dict of the jobs' environment, like the preflight's caches, are found that way).

What counts as the code's variables (an AST walk of the Python, a regex over the shell scripts):
- every `ARMOR_*` name written as a whole string constant anywhere in the repository's Python (tests
  included: `ARMOR_TEST_WORLD` is a knob of the test suite), set or read in a shell line inside a Python
  string (`export ARMOR_X=...`, `$ARMOR_X`), or read in a shell script (`$ARMOR_X`, `${ARMOR_X:-...}`);
- any other name the packages or scripts read with a literal key (`os.environ.get("X")`, `os.environ["X"]`,
  `os.getenv("X")`, `"X" in os.environ`, `environ.setdefault("X", ...)`, or a module-level `NAME_ENV = "X"`
  passed to them), and a shell default `${X:-...}` in a script. The tests' own reads of non-ARMOR names (a
  fake engine's knobs) are not the project's interface and are not listed.
"""
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("common", "armor", "eval", "reproduce", "slurm", "figures", "bench")
DOC = ROOT / "docs" / "environment.md"
NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
ARMOR = re.compile(r"^ARMOR_[A-Z0-9_]+$")
SHELL_ARMOR = re.compile(r"\$\{?(ARMOR_[A-Z0-9_]+)")
SHELL_SET = re.compile(r"(?:^|[\s;])(?:export\s+)?(ARMOR_[A-Z0-9_]+)=")
SHELL_DEFAULT = re.compile(r"\$\{([A-Z][A-Z0-9_]*):[-+=?]")
ROW = re.compile(r"^\| `([A-Z][A-Z0-9_]*)` \|")


def _python_files(folders) -> list[Path]:
    return sorted(f for d in folders for f in (ROOT / d).rglob("*.py") if ".venv" not in f.parts)


def _shell_files() -> list[Path]:
    found = sorted(f for d in PACKAGES + ("scripts",) for f in (ROOT / d).rglob("*.sh"))
    return found + [ROOT / ".ci" / "run"]


def _is_environ(node) -> bool:
    """`os.environ` or a bare `environ`."""
    return ((isinstance(node, ast.Attribute) and node.attr == "environ")
            or (isinstance(node, ast.Name) and node.id == "environ"))


def env_reads(tree: ast.AST) -> set[str]:
    """Names read from (or defaulted in) the environment by a literal key or a module constant holding one."""
    consts = {t.id: n.value.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
              and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
              for t in n.targets if isinstance(t, ast.Name)}

    def key(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return consts.get(node.id)
        return None

    out = set()
    for n in ast.walk(tree):
        k = None
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.args:
            if n.func.attr in ("get", "setdefault") and _is_environ(n.func.value):
                k = key(n.args[0])
            elif n.func.attr == "getenv":
                k = key(n.args[0])
        elif isinstance(n, ast.Subscript) and _is_environ(n.value):
            k = key(n.slice)
        elif (isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], (ast.In, ast.NotIn))
              and _is_environ(n.comparators[0])):
            k = key(n.left)
        if k and NAME.match(k):
            out.add(k)
    return out


def armor_names(tree: ast.AST) -> set[str]:
    """`ARMOR_*` names of string constants: the whole constant, or set or read by a shell line in it."""
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            if ARMOR.match(n.value):
                out.add(n.value)
            out |= set(SHELL_SET.findall(n.value)) | set(SHELL_ARMOR.findall(n.value))
    return out


def code_variables() -> dict[str, str]:
    """variable -> the first file that names it."""
    found: dict[str, str] = {}
    for f in _python_files(PACKAGES + ("scripts", "tests")):
        if f == Path(__file__).resolve():
            continue      # this file's own examples
        tree = ast.parse(f.read_text(), str(f))
        names = armor_names(tree)
        if f.parts[len(ROOT.parts)] != "tests":
            names |= env_reads(tree)
        for v in names:
            found.setdefault(v, str(f.relative_to(ROOT)))
    for f in _shell_files():
        text = f.read_text()
        for v in set(SHELL_ARMOR.findall(text)) | set(SHELL_DEFAULT.findall(text)):
            found.setdefault(v, str(f.relative_to(ROOT)))
    return found


def code_text() -> str:
    files = _python_files(PACKAGES + ("scripts", "tests")) + _shell_files()
    return "\n".join(f.read_text() for f in files if f != Path(__file__).resolve())


def documented(text: str) -> list[str]:
    """the variables of the doc's table rows, in order (a name twice appears twice)."""
    return [m.group(1) for line in text.splitlines() if (m := ROW.match(line))]


def test_every_variable_the_code_uses_is_listed_once_and_every_listed_one_is_used():
    doc = documented(DOC.read_text())
    twice = sorted({v for v in doc if doc.count(v) > 1})
    assert not twice, f"docs/environment.md lists these more than once: {twice}"
    code = code_variables()
    missing = sorted(f"{v} ({where})" for v, where in code.items() if v not in doc)
    assert not missing, f"variables the code uses that docs/environment.md does not list: {missing}"
    text = code_text()
    gone = sorted(v for v in set(doc) if not re.search(rf"\b{v}\b", text))
    assert not gone, f"docs/environment.md lists variables no code uses: {gone}"


def test_the_scanner_finds_each_form_of_read():
    src = ('import os\nSWITCH = "MY_KNOB"\nos.environ.get("A_1")\nos.environ["B"]\nos.getenv("C")\n'
           '"D" in os.environ\nos.environ.setdefault("E", "1")\nos.environ.get(SWITCH)\n'
           'x = "ARMOR_THING"\nos.environ.get(f"not{1}")\nprint("lower_case")\n')
    tree = ast.parse(src)
    assert env_reads(tree) == {"A_1", "B", "C", "D", "E", "MY_KNOB"}
    assert armor_names(tree) == {"ARMOR_THING"}
    assert armor_names(ast.parse('s = ["export ARMOR_L=slurm", "echo $ARMOR_M", "ARMOR_N is a word"]')) == {
        "ARMOR_L", "ARMOR_M"}
    assert SHELL_DEFAULT.findall('X="${ARMOR_S:-/var}" Y=${PYTHON:-python3} $PLAIN') == ["ARMOR_S", "PYTHON"]
    assert SHELL_ARMOR.findall("echo $ARMOR_A ${ARMOR_B:-1} $OTHER") == ["ARMOR_A", "ARMOR_B"]
    assert documented("| `A_1` | x |\n| not | y |\n| `B` | z |") == ["A_1", "B"]
