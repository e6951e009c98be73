"""Install requirements.txt and this package into a venv: with uv when it can be had, else pip.

    python tools/install_deps.py .venv

uv installs the pinned stack in about half a minute where pip takes over three (it resolves and
unpacks in parallel). uv does not read pip's configuration, so the indexes, find-links and
constraints that pip is configured with (pip.conf files and PIP_* variables, as ``pip config
list`` shows them) are handed to uv as its own settings: uv then finds the wheels pip would. Any
failure of the uv route falls back to plain pip, so an install never depends on uv. Standard
library only: it runs before anything is installed.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# pip setting -> (uv variable, separator between several values; None: uv takes one value)
PIP_TO_UV = {
    "index-url": ("UV_INDEX_URL", None),
    "extra-index-url": ("UV_EXTRA_INDEX_URL", " "),
    "find-links": ("UV_FIND_LINKS", ","),
    "constraint": ("UV_CONSTRAINT", " "),
}


def pip_settings(listing: str) -> dict[str, list[str]]:
    """``pip config list`` lines (``global.find-links='/a /b'``, ``:env:.find-links='/c'``) ->
    setting -> values in the order pip lists them, without repeats."""
    out: dict[str, list[str]] = {}
    for line in listing.splitlines():
        key, sep, raw = line.partition("=")
        name = key.rpartition(".")[2].strip()
        if not sep or name not in PIP_TO_UV:
            continue
        try:
            value = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError):
            value = raw.strip().strip("'\"")
        for item in str(value).split():
            if item not in out.setdefault(name, []):
                out[name].append(item)
    return out


def uv_environment(settings: dict[str, list[str]], base: dict[str, str]) -> dict[str, str]:
    """``base`` plus uv's equivalents of pip's settings. uv looks at every index for the best
    version, as pip does (``unsafe-best-match``), instead of stopping at the first that has a name."""
    env = dict(base)
    for name, values in settings.items():
        var, sep = PIP_TO_UV[name]
        env[var] = values[-1] if sep is None else sep.join(values)
    env["UV_INDEX_STRATEGY"] = "unsafe-best-match"
    return env


def run(cmd: list[str], env: dict[str, str] | None = None) -> bool:
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, env=env, cwd=REPO).returncode == 0


def main(argv: list[str]) -> int:
    venv = Path(argv[0] if argv else ".venv").absolute()
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip"]
    requirements = ["-r", "requirements.txt"]
    if not os.environ.get("DRIFTMATRIX_NO_UV") and run([*pip, "install", "-q", "uv"]):
        listing = subprocess.run([*pip, "config", "list"], capture_output=True, text=True).stdout
        env = uv_environment(pip_settings(listing), dict(os.environ))
        # no --compile-bytecode: compiling all 24k files takes a minute on 2 cores, and the pipeline
        # imports a fifth of them; each is compiled the first time it is imported (see the Makefile)
        uv = [python, "-m", "uv", "pip", "install", "--python", python]
        if run([*uv, *requirements], env) and run([*uv, "--no-deps", "-e", "."], env):
            return 0
        print("uv could not install the requirements; installing with pip instead", flush=True)
    ok = run([*pip, "install", "-q", *requirements]) and run([*pip, "install", "-q", "--no-deps", "-e", "."])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
