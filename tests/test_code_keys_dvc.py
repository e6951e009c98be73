"""Code keys through real `dvc repro` runs (the issue's acceptance criteria): appending a comment,
editing a docstring, rewording every log message or adding a catalog variant retrains and
rescores nothing; a statement in one image model's class retrains that model only; one in the
image builder retrains the image models; one at the top of the training loop retrains every unit;
editing a project estimator module retrains that model's units only.

A scratch project (a copy of src/ and dvc.yaml, tiny params) runs with PYTHONPATH pointing at its
own src/, so the code that runs, and that is digested into the unit keys, is the scratch copy the
test edits. `driftmatrix.models.image` builds MLP-S and CNN-S but is on no path of Prior (its
builder is `driftmatrix.models.heads`).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testkit.codekeys import insert_statement, reword_reports

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MODELS = ("MLP-S", "CNN-S", "Prior")
YEARS = 4
# the train and evaluate stages and what they depend on: the edits below are judged by these
# stages' logs, so the stages after them (audit, matrices, report...) run once, at the end
UNITS = ["dvc", "repro", "evaluate"]


def sh(cmd: list[str], cwd: Path, env: dict) -> str:
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{' '.join(cmd)} failed:\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}"
    return out.stdout + out.stderr


def ran(output: str) -> set[str]:
    return set(re.findall(r"Running stage '([^']+)'", output))


def trained(output: str) -> dict[str, tuple[int, int, int]]:
    """model -> (units in the plan, done, to train), from the train stages' logs."""
    found = re.findall(r"(\S+): (\d+) units in the plan \(cumulative window\), (\d+) done, (\d+) to train", output)
    assert len(found) == len({m for m, *_ in found}), found  # one line per model that ran
    return {m: tuple(map(int, n)) for m, *n in found}


def scored(output: str) -> dict[str, tuple[int, int, int]]:
    """model -> (cells in the plan, to score, units), from the evaluate stages' logs."""
    found = re.findall(r"(\S+): (\d+) cells in the plan, (\d+) to score \((\d+) units\)", output)
    assert len(found) == len({m for m, *_ in found}), found
    return {m: tuple(map(int, n)) for m, *n in found}


def unit_folders(work: Path, model: str) -> dict[str, dict[str, str]]:
    """unit key -> {file name: sha256} of every unit folder under outputs/checkpoints/<model>/."""
    root = work / "outputs" / "checkpoints" / model
    return {d.name: {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(d.iterdir()) if f.is_file()}
            for d in sorted(root.iterdir()) if d.is_dir() and (d / "unit.json").exists()}


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{path}: {old!r} found {text.count(old)} times"
    path.write_text(text.replace(old, new))


def scratch(tmp_path: Path, params: dict, files: dict[str, str] | None = None) -> tuple[Path, dict]:
    """A git + DVC project of src/, dvc.yaml, ``files`` (path -> text) and ``params`` (tiny, tracking
    in tmp_path), data added."""
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    work = tmp_path / "repo"
    work.mkdir()
    shutil.copytree(REPO / "src", work / "src", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(REPO / "dvc.yaml", work / "dvc.yaml")
    for path, text in (files or {}).items():
        (work / path).write_text(text)
    params["slicing"]["min_samples"] = 10
    params["validation"]["min_rows"] = 5
    params["train"].update(seeds=[0], epochs=1)
    params["tracking"].update(uri=f"sqlite:///{tmp_path / 'mlflow.db'}", artifact_root=str(tmp_path / "mlruns"),
                              log_models=False, register=False)
    params["audit"].update(permutations=20, mmd_samples=50)
    params["saliency"] = {**params.get("saliency", {}), "pairs": [], "eval_years": []}  # saliency off
    params.setdefault("runtime", {}).update(workers=1)
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # bytecode is written
    env.update(PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}",
               PYTHONPATH=os.pathsep.join(p for p in (str(work / "src"), os.environ.get("PYTHONPATH")) if p),
               MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}", GIT_AUTHOR_NAME="t",
               GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    where = sh(["python", "-c", "import driftmatrix.units.code as p; print(p.PACKAGE_DIR)"], work, env)
    assert Path(where.strip()) == work / "src" / "driftmatrix"  # the scratch copy runs and is digested
    for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"]):
        sh(cmd, work, env)
    shutil.copy(REPO / ".dvcignore", work / ".dvcignore")  # __pycache__/ and *.pyc
    for cmd in (["driftmatrix", "data", "generate"], ["dvc", "add", "-q", "data"]):
        sh(cmd, work, env)
    return work, env


def settled(output: str, models, stale=()) -> None:
    """The train and evaluate stages of ``models`` ran; those of ``stale`` retrained and rescored
    every unit and cell, the others found every unit done and every cell scored."""
    assert {f"{s}@{m}" for s in ("train", "evaluate") for m in models} <= ran(output)
    assert trained(output) == {m: (YEARS, 0, YEARS) if m in stale else (YEARS, YEARS, 0) for m in models}
    assert scored(output) == {m: (YEARS * YEARS, YEARS * YEARS, YEARS) if m in stale else (YEARS * YEARS, 0, 0)
                              for m in models}


@pytest.mark.slow
def test_comments_and_docstrings_retrain_nothing_a_statement_retrains_its_units(tmp_path):
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["synthetic"].update(years=YEARS, per_year=30)
    params["models"] = {m: {} for m in MODELS}
    work, env = scratch(tmp_path, params)

    first = sh(UNITS, work, env)  # the stages after evaluate run once, at the end
    settled(first, MODELS, stale=set(MODELS))
    before = {m: unit_folders(work, m) for m in MODELS}
    assert {m: len(before[m]) for m in MODELS} == {m: YEARS for m in MODELS}

    # a comment appended and a docstring edited, every log message reworded: no stage's code digest
    # changes, so only the code stage runs
    image = work / "src" / "driftmatrix" / "models" / "image.py"
    image.write_text(image.read_text() + "# a comment appended by tests/test_code_keys_dvc.py\n")
    edit(image, '"""The network of a catalogue entry', '"""The network (edited docstring) of a catalogue entry')
    assert sum(reword_reports(path) for path in (work / "src" / "driftmatrix").rglob("*.py")) > 40
    assert ran(sh(UNITS, work, env)) == {"code"}

    # a model variant added to the catalog: DVC reruns the stages whose code holds the file, and
    # they find every unit done and every cell scored
    catalog = work / "src" / "driftmatrix" / "models" / "catalog.py"
    edit(catalog, '    "CNN-L":', '    "CNN-XS": ("CNN", "CNN", {"channels": (8, 16)}),\n    "CNN-L":')
    variant = sh(UNITS, work, env)
    settled(variant, MODELS)
    assert {m: unit_folders(work, m) for m in MODELS} == before  # same keys, same bytes

    # a statement in CNN's class: CNN-S's units, not MLP-S's (same module) nor Prior's
    insert_statement(image, "CNN.__init__", "in_channels = int(in_channels)")
    settled(sh(UNITS, work, env), MODELS, stale={"CNN-S"})
    assert {m: unit_folders(work, m) for m in ("MLP-S", "Prior")} == {m: before[m] for m in ("MLP-S", "Prior")}
    before = {m: unit_folders(work, m) for m in MODELS}

    # a changed statement in the function that builds the image models: all of MLP-S's and CNN-S's
    # units, none of Prior's
    edit(image, "    kwargs = dict(shape)\n", "    kwargs = dict(shape)\n    kwargs = dict(kwargs)\n")
    changed = sh(UNITS, work, env)
    settled(changed, MODELS, stale={"MLP-S", "CNN-S"})
    after = {m: unit_folders(work, m) for m in MODELS}
    assert after["Prior"] == before["Prior"]
    new = set(after["MLP-S"]) - set(before["MLP-S"])
    assert len(new) == YEARS  # four new keys; the old folders stay (reused if the code comes back)
    assert {k: after["MLP-S"][k] for k in before["MLP-S"]} == before["MLP-S"]

    # a statement at the top of the training loop: every unit of every model, in a run of the whole
    # pipeline (the stages after evaluate catch up); then up to date, and bytecode written beside the
    # modules (by the stages, and here on purpose) leaves the directory dependencies' hashes alone
    insert_statement(work / "src" / "driftmatrix" / "learn" / "fit.py", "fit", "seed = int(seed)")
    settled(sh(["dvc", "repro"], work, env), MODELS, stale=set(MODELS))
    assert "up to date" in sh(["dvc", "status"], work, env)
    sh(["python", "-m", "compileall", "-q", "-f", str(work / "src")], work, env)
    assert list((work / "src" / "driftmatrix" / "models" / "__pycache__").glob("image*.pyc"))
    assert "up to date" in sh(["dvc", "status"], work, env)
    assert ran(sh(["dvc", "repro"], work, env)) == set()


MINE = '''from sklearn.linear_model import LogisticRegression


class MyEst(LogisticRegression):
    def fit(self, X, y, sample_weight=None):
        return super().fit(X, y, sample_weight)
'''


@pytest.mark.slow
def test_editing_a_project_estimator_module_retrains_that_models_units_only(tmp_path):
    """An estimator named by import path whose module is project code (src/custom_models/, part of
    the train stage's code) is keyed by its code: editing it reruns the train stages; MyEst's
    retrains its units, the other models' find theirs done."""
    params = yaml.safe_load((REPO / "presets" / "tabular.yaml").read_text())
    params["synthetic"].update(years=YEARS, per_year=60)
    params["models"] = {"LogReg": {}, "MyEst": {"estimator": "custom_models.mine.MyEst"}}
    work, env = scratch(tmp_path, params, {"src/custom_models/mine.py": MINE})  # params name it: it must exist
    module = work / "src" / "custom_models" / "mine.py"
    models = tuple(params["models"])
    settled(sh(["dvc", "repro"], work, env), models, stale=set(models))  # importance and report load MyEst too
    module.write_text("# a comment\n" + MINE)  # no stage's code digest changes
    assert ran(sh(UNITS, work, env)) == {"code"}
    module.write_text(MINE.replace("super().fit(X, y, sample_weight)", "super().fit(X * 1.0, y, sample_weight)"))
    again = sh(UNITS, work, env)
    assert trained(again) == {"LogReg": (YEARS, YEARS, 0), "MyEst": (YEARS, 0, YEARS)}
    assert scored(again) == {"MyEst": (YEARS * YEARS, YEARS * YEARS, YEARS)}  # LogReg's checkpoints: unchanged
    assert "up to date" in sh(["dvc", "status", *UNITS[2:]], work, env)  # the stages after evaluate wait
