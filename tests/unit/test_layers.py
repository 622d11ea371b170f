"""The packages' import directions, function-level imports included (an AST walk of every module), and no
hidden couplings: no string in code that names a higher package, as a module or as a path.

Allowed: reproduce -> {armor, eval, slurm, figures, common}; bench (tools) -> {armor, eval, reproduce,
common}; armor, eval, slurm, figures -> common, the leaf layer (rollout engines, grading, benchmark registry
and prompt templates, sampling, metrics, model loading, run-folder layout, YAML presets, JSONL I/O); common ->
nothing of the repo. The string rule reads every string constant (f-string parts too) but docstrings:
`pkg.module` and `pkg/path` of a package a layer may not import fail it, and so does a bare package name in a
path built from the module's own location (`Path(__file__).parents[1] / "eval"`) or handed to an import
function."""
import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("common", "armor", "eval", "reproduce", "slurm", "figures", "bench")
ALLOWED = {
    "common": set(),
    "armor": {"common"},
    "eval": {"common"},
    "slurm": {"common"},
    "figures": {"common"},
    "reproduce": {"common", "armor", "eval", "slurm", "figures"},
    "bench": {"common", "armor", "eval", "reproduce"},
}
# (file, the name it mentions) -> why: a string that names a higher package, allowed for a stated reason
# (none now: help text names docs/, not the package that owns a section)
STRING_ALLOW: dict[tuple[str, str], str] = {}
IMPORTERS = {"import_module", "__import__", "find_spec", "run_module"}   # calls that take a module name
JOINERS = {"joinpath", "join", "Path", "PurePath"}                      # calls that build a path


@functools.lru_cache(maxsize=None)
def _parse(f: Path) -> ast.Module:
    """One parse of a file for every test of this module (the walks read the same ~250 files)."""
    return ast.parse(f.read_text(), str(f))


def imports():
    """(package, file, imported module) for every import of a repo package by another one."""
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(_parse(f)):
                if isinstance(node, ast.Import):
                    mods = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    mods = [node.module]
                else:
                    continue
                for m in mods:
                    if m.split(".")[0] in PACKAGES and m.split(".")[0] != pkg:
                        yield pkg, f.relative_to(ROOT), m


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _anchored(tree: ast.AST) -> set[str]:
    """Names bound (anywhere in the module) to a value built from `__file__`, or from such a name."""
    names: set[str] = {"__file__"}
    while True:
        before = len(names)
        for n in ast.walk(tree):
            if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None:
                if any(isinstance(x, ast.Name) and x.id in names for x in ast.walk(n.value)):
                    targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                    names |= {t.id for t in targets if isinstance(t, ast.Name)}
        if len(names) == before:
            return names


def _strings(node: ast.AST):
    return [x for x in ast.walk(node) if isinstance(x, ast.Constant) and isinstance(x.value, str)]


def string_couplings(pkg: str, f: Path):
    """(line, the higher package's name as the string has it) for each string of `f` that names one."""
    bad = sorted(set(PACKAGES) - ALLOWED[pkg] - {pkg})
    # repo-relative: at the start of a path or a word (runs/x/figures/ is a run folder, not the package)
    dotted = re.compile(r"(?<![\w.\-/])((?:%s)(?:[./][A-Za-z_]\w*)+)" % "|".join(bad))
    tree = _parse(f)
    docs, anchored = _docstrings(tree), _anchored(tree)
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            for m in dotted.finditer(n.value):
                yield n.lineno, m.group(1)
        # a bare package name: a path component next to the module's own location, or a module to import
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div):
            parts, from_file = [n.left, n.right], True
        elif isinstance(n, ast.Call):
            fn = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
            parts = list(n.args)
            from_file = fn in JOINERS
            if fn in IMPORTERS:
                for s in _strings(n.args[0]) if n.args else []:
                    if s.value.split(".")[0] in bad:
                        yield s.lineno, s.value
                continue
            if not from_file:
                continue
        else:
            continue
        here = any(isinstance(x, ast.Name) and x.id in anchored for p in parts for x in ast.walk(p))
        if here and from_file:
            for s in (s for p in parts for s in _strings(p)):
                if s.value.strip("/").split("/")[0] in bad:
                    yield s.lineno, s.value


def strings():
    """(file, line, name) for every string in code that names a package its layer may not use."""
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            rel = str(f.relative_to(ROOT))
            for line, name in string_couplings(pkg, f):
                if (rel, name) not in STRING_ALLOW:
                    yield rel, line, name


def test_imports_point_the_allowed_way():
    bad = [(str(f), m) for pkg, f, m in imports() if m.split(".")[0] not in ALLOWED[pkg]]
    assert not bad, bad


def test_armor_imports_nothing_from_reproduce_or_bench():
    assert not [(str(f), m) for pkg, f, m in imports() if pkg == "armor"
                and m.split(".")[0] in ("reproduce", "bench")]


def test_no_string_in_code_names_a_higher_package():
    """Module names and paths in strings are imports the first test cannot see (warm-start preloads, data
    folders, commands in messages): each must go through the layer that owns it."""
    bad = sorted(set(strings()))
    assert not bad, bad


def test_slurm_names_none_of_the_drivers_job_kinds():
    """Job kinds and their resources are the driver's (reproduce/dag/resources.py): slurm takes resources per
    job
    as data, so no string in its code is one of the driver's kinds."""
    from reproduce.dag.resources import KINDS
    found = []
    for f in sorted((ROOT / "slurm").rglob("*.py")):
        tree = _parse(f)
        docs = _docstrings(tree)
        found += [(str(f.relative_to(ROOT)), s.lineno, s.value) for s in _strings(tree)
                  if s.value in KINDS and id(s) not in docs]
    assert not found, found


def test_the_string_rule_catches_each_kind_of_coupling(tmp_path):
    """The couplings this rule was written against, each as a lower layer would write it."""
    cases = {
        "slurm": 'PRELOAD = ("torch", "armor.trainer", "eval.evaluate")\n',
        "common": 'from pathlib import Path\nDATA = Path(__file__).resolve().parents[2] / "eval" / "data"\n',
        "eval": ('from pathlib import Path\nROOT = Path(__file__).parents[1]\n'
                 'PRESETS = ROOT / "reproduce" / "presets"\n'),
        "armor": 'def hint(w):\n    return f"python -m reproduce.toy.build --out {w}"\n',
        "figures": 'import importlib\nm = importlib.import_module("armor")\n',
    }
    for pkg, src in cases.items():
        f = tmp_path / f"{pkg}.py"
        f.write_text(f'"""A docstring may say reproduce/presets and armor.trainer."""\n{src}')
        assert list(string_couplings(pkg, f)), pkg
    ok = tmp_path / "ok.py"    # labels and run-folder names are not packages; reproduce may name armor
    ok.write_text('ROW = {"source": "eval", "arm": "armor"}\nOUT = "runs/x/figures/fig4.png"\n')
    assert not list(string_couplings("common", ok))
    (tmp_path / "up.py").write_text('CMD = ["python", "-m", "armor.train"]\n')
    assert not list(string_couplings("reproduce", tmp_path / "up.py"))


def module_graph() -> dict[str, set[str]]:
    """Module -> the repo modules it imports (every import in it, function-level ones included): `from a.b
    import c` is an import of a.b.c when that is a module, else of a.b."""
    files = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            parts = list(f.relative_to(ROOT).with_suffix("").parts)
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    graph: dict[str, set[str]] = {}
    for mod, f in files.items():
        out = graph.setdefault(mod, set())
        pkg_of = mod if f.name == "__init__.py" else mod.rsplit(".", 1)[0]
        for node in ast.walk(_parse(f)):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg_of.split(".")[:len(pkg_of.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            else:
                continue
            out |= {t for t in targets if t in files and t != mod}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_anywhere():
    """No two modules import each other, directly or through others, function-level imports counted."""
    assert not import_cycles(module_graph())


def test_the_cycle_finder_sees_a_circle_through_a_function_level_import():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []
