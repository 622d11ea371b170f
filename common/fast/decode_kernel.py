"""The compiled decode kernel (decode_kernel.c): norm, RoPE, attention over the KV cache and silu · up of a
CPU float32 decode step in C, between torch's weight products (static_kv_decode.StaticStepper). Built once per
machine with the C compiler, loaded by ctypes; the same bits on every x86-64 CPU (no fused multiply-add, no
fast-math, sums never vectorised).

Opt-in: the run's `compute.fast: native` (common/fast/__init__.py); `kernel()` raises where the kernel cannot
be had, and the run then fails at its start, naming the key. Built on first use (scripts/setup.sh builds it)
into $ARMOR_NATIVE_CACHE (default $XDG_CACHE_HOME/armor-repro/native, else ~/.cache/...), one file per source,
compiler flags and machine, written to a temporary name and renamed: jobs that start together each build or
find a whole file, never a half-written one. $CC names the compiler (default `cc`).
"""
from __future__ import annotations

import ctypes
import getpass
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("decode_kernel.c")
# no fused multiply-add and no fast-math: the kernel's bits must not depend on the CPU it runs on
FLAGS = ["-O3", "-std=c11", "-shared", "-fPIC", "-ffp-contract=off", "-fno-math-errno",
         "-fno-trapping-math"]

_I, _F, _P = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
_SIGNATURES = {
    "rms_rows": [_I, _I, _P, _P, _F],
    "silu_mul": [_I, _I, _P, _P],
    "attend": [_I, _I, _I, _I, _I, _I, _F, _P, _P, _P, _P, _P, _F, _P, _P, _P, _P, _P],
}
_loaded: dict = {}


def _flags() -> list[str]:
    # vector width only: the same bits with or without it (the kernel's loops never vectorise a sum)
    if platform.machine().lower() in ("x86_64", "amd64") and _cpu_has("avx2"):
        return FLAGS + ["-mavx2"]
    return FLAGS


def _cpu_has(flag: str) -> bool:
    try:
        return any(flag in line.split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("flags"))
    except OSError:
        return False


def cache_dir() -> Path:
    """$ARMOR_NATIVE_CACHE, else the user's cache folder; a temporary one where that cannot be written."""
    if os.environ.get("ARMOR_NATIVE_CACHE"):
        return Path(os.environ["ARMOR_NATIVE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    out = Path(base) / "armor-repro" / "native"
    try:
        out.mkdir(parents=True, exist_ok=True)
        if os.access(out, os.W_OK):
            return out
    except OSError:
        pass
    return Path(tempfile.gettempdir()) / f"armor-repro-native-{_user()}"


def _user() -> str:
    """The user's name or id for a per-user temporary folder (os.getuid exists on POSIX only)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError, ImportError):      # no login name in the environment or the password database
        return str(os.getuid()) if hasattr(os, "getuid") else "user"


def library_path(cc: str, flags: list[str] | None = None) -> Path:
    """Where the build of this source with these flags (default: this machine's), by this compiler, for this
    machine lives."""
    parts = [SOURCE.read_text(), cc, *(flags or _flags()), platform.machine()]
    key = hashlib.sha256("\0".join(parts).encode())
    return cache_dir() / f"decode_kernel-{key.hexdigest()[:16]}.so"


def compiler() -> str:
    return os.environ.get("CC", "cc")


def build(cc: str | None = None, flags: list[str] | None = None) -> Path:
    """Compile the kernel (if not built yet) and return the library's path; raises RuntimeError on failure.
    `flags`: other compiler flags than this machine's (the tests build it for other vector units)."""
    cc, flags = cc or compiler(), flags or _flags()
    if shutil.which(cc) is None:
        raise RuntimeError(f"no C compiler {cc!r} on PATH (set CC)")
    out = library_path(cc, flags)
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
    os.close(fd)
    try:
        r = subprocess.run([cc, *flags, str(SOURCE), "-o", tmp, "-lm"], capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"{cc} failed on {SOURCE.name}: {r.stderr.strip()[-500:]}")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def load(path: Path) -> ctypes.CDLL:
    """A built kernel library, its functions' argument types set."""
    lib = ctypes.CDLL(str(path))
    for name, args in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, None
    return lib


def kernel() -> ctypes.CDLL:
    """The loaded kernel library (ctypes, argument types set), built on first use; raises RuntimeError or
    OSError where it cannot be had (no compiler, a failed build or load)."""
    if "lib" not in _loaded:
        _loaded["lib"] = load(build())
    return _loaded["lib"]


if __name__ == "__main__":
    # scripts/setup.sh: build it now; without a compiler say so (compute.fast: native then fails the run)
    try:
        kernel()
        print(f"decode kernel: {library_path(compiler())}")
    except (RuntimeError, OSError) as e:
        print(f"decode kernel not built ({e}): compute.fast: native is unavailable here; auto and off work")
