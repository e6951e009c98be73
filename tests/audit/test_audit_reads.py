"""The audit stage reads only what dvc.yaml declares for it: it runs on the slices before any
model is trained, so model matrices lying in outputs/matrices must never be opened or listed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from testkit.slices import make_slices, write_slices

REPO = Path(__file__).resolve().parents[2]

# Runs `driftmatrix audit` with an audit hook that records every file opened and folder listed.
SCRIPT = """
import json, os, sys
seen = []
def hook(event, args):
    if event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], (str, bytes, os.PathLike)):
        seen.append(os.path.abspath(os.fsdecode(args[0])))
sys.addaudithook(hook)
from driftmatrix.cli import app
try:
    app(["audit", "--no-track"])  # as dvc.yaml runs it
except SystemExit as exc:
    assert not exc.code, exc.code
with open("seen.json", "w") as f:
    json.dump(seen, f)
"""


def _declared_deps(stage: str) -> list[str]:
    spec = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"][stage]
    return [d if isinstance(d, str) else next(iter(d)) for d in spec["deps"]]


def test_audit_stage_never_opens_the_model_matrices(tmp_path):
    rows, manifest, images = make_slices(k=4, per_slice=60, input_kind="image", label_shift=0.5)
    write_slices(tmp_path / "outputs" / "slices", rows, manifest, images)
    labels = [s["label"] for s in manifest["slices"]]
    matrices = tmp_path / "outputs" / "matrices"
    matrices.mkdir()
    (matrices / "MLP-S.json").write_text(json.dumps(
        {"dataset": "synthetic", "model": "MLP-S", "metric": "accuracy", "higherIsBetter": True,
         "slices": labels, "values": [[80.0] * 4] * 4}))
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(
        {"models": {"MLP-S": {}}, "audit": {"mmd_samples": 40, "permutations": 10, "image_size": 4},
         "tracking": {"experiment": "audit-reads"}}))
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "outputs" / "audit" / "report.html").exists()
    seen = json.loads((tmp_path / "seen.json").read_text())
    outputs = tmp_path / "outputs"
    read = {Path(p).relative_to(tmp_path).as_posix() for p in seen if Path(p).is_relative_to(outputs)}
    assert read, "the hook saw no reads under outputs/"
    assert not [p for p in read if p.startswith("outputs/matrices")], sorted(read)
    # everything else it reads under outputs/ is one of its declared deps, or its own output
    declared = _declared_deps("audit") + ["outputs/audit"]
    undeclared = [p for p in read if not any(p == d or p.startswith(d + "/") for d in declared)]
    assert not undeclared, f"audit reads {undeclared} without declaring them in dvc.yaml"
