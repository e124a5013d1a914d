"""Compile servesim's modules to bytecode before they are timed, as ``pip install`` does.

A package installed from a wheel or a source directory has its ``.pyc`` files written at
install time; an editable install or a ``git archive`` tree on ``PYTHONPATH`` has none until
an import writes them, and none at all where ``PYTHONDONTWRITEBYTECODE`` is set. Every
measured process would then compile the project's sources again (about 0.3 s of start-up on
a 2-core machine), a cost no installed copy pays and the reference, installed from wheels,
does not pay either. :func:`ensure_bytecode` writes the ``__pycache__`` files of
``servesim`` and every ``servesim_*`` package that ``python`` (with ``env``) imports,
with :mod:`compileall`, which writes them whatever that variable says.
"""

from __future__ import annotations

import subprocess
import sys

_SNIPPET = """
import compileall, importlib.util, pkgutil
names = ["servesim"] + sorted({m.name for m in pkgutil.iter_modules() if m.name.startswith("servesim_")})
dirs = []
for name in names:
    spec = importlib.util.find_spec(name)
    for loc in (spec.submodule_search_locations or []) if spec else []:
        if loc not in dirs:
            dirs.append(loc)
ok = all([compileall.compile_dir(d, quiet=1) for d in dirs])
print(len(dirs))
raise SystemExit(0 if ok else 1)
"""


def ensure_bytecode(python: str = sys.executable, env: dict[str, str] | None = None) -> str:
    """Compile the servesim packages ``python`` sees; a line saying how many folders, or why not."""
    done = subprocess.run([python, "-c", _SNIPPET], env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["failed"]
        return f"bytecode: not compiled for {python} ({tail[0]})"
    return f"bytecode: {done.stdout.strip()} package folders compiled for {python}"


__all__ = ["ensure_bytecode"]
