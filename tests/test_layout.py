"""The package's layout (CONTRIBUTING.md, "How the code is laid out"): stages, the side-effect-free
core and the adapters, with imports that only run down the layers and no circle."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from driftmatrix.units import code

REPO = Path(__file__).resolve().parents[1]
#: Layers, lowest first; the core is every package not named here.
LAYERS = {"tracking": 1, "runtime": 1, "stages": 2, "cli": 3, "__main__": 4}


def layer(module: str) -> int:
    return LAYERS.get(module.split(".")[1], 0) if "." in module else 0


def graph() -> dict[str, set[str]]:
    """module -> the package modules it imports, at top level or inside functions."""
    pkg = code.PACKAGE_DIR
    modules = []
    for path in pkg.rglob("*.py"):
        parts = list(path.relative_to(pkg.parent).with_suffix("").parts)
        modules.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    for cached in (code._module, code._resolve):
        cached.cache_clear()
    return {m: {r[0] for t in code._module(m).imports if (r := code._resolve(t)) and r[0] != m} for m in modules}


def test_no_circle_between_modules():
    edges = graph()
    assert "driftmatrix.units.store" in edges["driftmatrix.stages.train"]
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while not part or part[-1] != v:
                part.append(stack.pop())
            if len(part) > 1:
                circles.append(sorted(part))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert circles == []


def test_imports_run_down_the_layers():
    """The core imports no stage, tracking or runtime module; adapters import no stage; at most
    two imports in all run back up (none today)."""
    upward = sorted((a, b) for a, bs in graph().items() for b in bs if layer(b) > layer(a) and not a.endswith("__main__"))
    core_up = [(a, b) for a, b in upward if layer(a) == 0]
    assert core_up == []
    assert len(upward) <= 2, upward


def test_every_dvc_stage_is_a_module_of_stages_that_its_command_runs():
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    cli = (REPO / "src" / "driftmatrix" / "cli.py").read_text()
    for name, spec in stages.items():
        cmd = (spec.get("do") or spec)["cmd"]
        command = re.match(r"driftmatrix (\w+)", cmd).group(1)
        assert command == name, f"dvc.yaml stage {name} runs `driftmatrix {command}`"
        assert (REPO / "src" / "driftmatrix" / "stages" / f"{name}.py").is_file(), name
        body = re.search(rf'@app\.command\((?:"{name}")?\)\ndef {name}\w*\(.*?(?=\n@app\.command|\ndef main)', cli, re.S)
        assert body and f"driftmatrix.stages import {name}" in body.group(0), f"`driftmatrix {name}` is not stages/{name}.py"


def test_test_files_have_unique_basenames():
    """pytest imports test files by basename (no packages under tests/): two with one name cannot
    both be collected in one run."""
    from collections import Counter

    tests = Path(__file__).parent
    names = Counter(p.name for p in tests.rglob("test_*.py") if "testkit" not in p.parts)
    assert not [n for n, c in names.items() if c > 1]
