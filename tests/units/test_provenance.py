"""Keys cover code and environment (driftmatrix.units.code); the stages of dvc.yaml depend on the same code."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from driftmatrix.units import store as checkpoints
from driftmatrix.units import code as provenance
from driftmatrix.units import environment
from driftmatrix.config import ConfigError, parse_params
from driftmatrix.units.environment import Environment

REPO = Path(__file__).resolve().parents[2]


forget = provenance.forget


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    """A ``driftmatrix`` package folder of our own, digested instead of the real one."""
    pkg = tmp_path / "driftmatrix"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    monkeypatch.setattr(provenance, "PACKAGE_DIR", pkg)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # its keys kept apart from the real ones
    forget()
    yield pkg
    forget()


def _digest(pkg: Path, source: str) -> str:
    (pkg / "m.py").write_text(source)
    forget()
    return provenance.code_key(("driftmatrix.m.f",))


def test_comments_and_docstrings_change_no_digest_but_a_statement_does(fake_package):
    base = _digest(fake_package, 'def f(x):\n    return x + 1\n')
    assert _digest(fake_package, '"""Module."""\n# note\ndef f(x):\n    """Add one."""\n    return x + 1  # why\n') == base
    assert _digest(fake_package, 'def f(x):\n\n\n    return (x +\n            1)\n') == base
    assert _digest(fake_package, 'def f(x):\n    return x + 2\n') != base
    assert _digest(fake_package, 'def f(y):\n    return y + 1\n') != base


def _kept_key(pkg: Path, monkeypatch) -> tuple[str, bool]:
    """The code key of driftmatrix.m.f in a fresh process's state, and whether it came from the cache."""
    forget()
    computed = []
    real = provenance.reach
    monkeypatch.setattr(provenance, "reach", lambda *a: computed.append(a) or real(*a))
    return provenance.code_key(("driftmatrix.m.f",)), not computed


def test_a_kept_code_key_is_used_only_while_every_file_that_made_it_is_unchanged(fake_package, monkeypatch):
    (fake_package / "m.py").write_text("from driftmatrix.h import g\n\ndef f(x):\n    return g(x)\n")
    (fake_package / "h.py").write_text("def g(x):\n    return x + 1\n")
    first, kept = _kept_key(fake_package, monkeypatch)
    assert not kept and len(list((fake_package.parent / "cache" / "driftmatrix" / "code-keys").glob("*.json"))) == 1
    assert _kept_key(fake_package, monkeypatch) == (first, True)  # the next process digests nothing
    (fake_package / "h.py").write_text("def g(x):\n    return x + 2\n")  # a file the key reached, edited
    second, kept = _kept_key(fake_package, monkeypatch)
    assert not kept and second != first
    (fake_package / "h.py").write_text("# a comment\ndef g(x):\n    return x + 2\n")  # other bytes: digested again,
    assert _kept_key(fake_package, monkeypatch) == (second, False)  # the same key
    (fake_package / "h").mkdir()  # a package now shadows the module: the name means another file
    (fake_package / "h" / "__init__.py").write_text("def g(x):\n    return x + 2\n")
    third, kept = _kept_key(fake_package, monkeypatch)
    assert not kept and third == second  # the same definition (keys name definitions, not files)
    (fake_package / "h" / "__init__.py").write_text("def g(x):\n    return x * 2\n")
    assert _kept_key(fake_package, monkeypatch)[0] not in (first, second)
    monkeypatch.setenv("DRIFTMATRIX_CODE_CACHE", "off")
    (fake_package / "h" / "__init__.py").write_text("def g(x):\n    return x + 2\n")
    assert _kept_key(fake_package, monkeypatch) == (second, False)


def test_a_broken_or_unwritable_code_key_cache_only_costs_the_digest(fake_package, monkeypatch):
    (fake_package / "m.py").write_text("def f(x):\n    return x\n")
    first, _ = _kept_key(fake_package, monkeypatch)
    [kept] = (fake_package.parent / "cache" / "driftmatrix" / "code-keys").glob("*.json")
    kept.write_text('{"key": ')
    assert _kept_key(fake_package, monkeypatch) == (first, False)
    assert _kept_key(fake_package, monkeypatch) == (first, True)  # written again
    monkeypatch.setenv("XDG_CACHE_HOME", str(kept))  # a file where the cache's folder would be
    assert _kept_key(fake_package, monkeypatch) == (first, False)


def _modules(roots) -> set[str]:
    forget()
    return {m for (m, _), sha in provenance.reach(roots)[0].items() if sha}


def test_model_code_follows_the_builders_imports(fake_package):
    (fake_package / "models").mkdir()
    (fake_package / "models" / "__init__.py").write_text("")
    (fake_package / "models" / "net.py").write_text("def build():\n    from driftmatrix.models.parts import P\n"
                                                    "    return P\n")
    (fake_package / "models" / "parts.py").write_text("import numpy\nP = 1\nQ = numpy.zeros(1)\n")
    assert _modules(("driftmatrix.models.net.build",)) == {"driftmatrix.models.net", "driftmatrix.models.parts"}
    reached = provenance.reach(("driftmatrix.models.net.build",))[0]
    assert ("driftmatrix.models.parts", "P") in reached and ("driftmatrix.models.parts", "Q") not in reached


def _stage_deps(stage: str) -> list[str]:
    spec = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"][stage]
    deps = (spec.get("do") or spec)["deps"]
    return [d if isinstance(d, str) else next(iter(d)) for d in deps]


def test_every_stage_depends_on_its_code_digest_and_names_no_source_file():
    """Each stage of dvc.yaml (but the code stage) has its STAGE_CODE entry and one code dep, its
    digest: a source file listed beside it would be in dvc.lock again (DVC rewrites the lock after
    every stage)."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    assert set(stages) - {"code"} == set(provenance.STAGE_CODE)
    for stage in provenance.STAGE_CODE:
        deps = _stage_deps(stage)
        assert f"outputs/code/{stage}.json" in deps, stage
        assert not [d for d in deps if d.startswith("src/")], stage
    assert _stage_deps("code") == ["src/driftmatrix", "src/custom_models"]


def _covered(path: str, deps: list[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in deps)


def _files(deps: list[str]) -> set[str]:
    """The package files with code (not empty ``__init__.py``) that ``deps`` cover."""
    files = {str(p.relative_to(REPO)) for p in (REPO / "src" / "driftmatrix").rglob("*.py") if p.read_text().strip()}
    return {f for f in files if _covered(f, deps)}


#: What computes and checks the keys (by value) and stores units, beside the code they digest.
KEYING = {"src/driftmatrix/units/plan.py", "src/driftmatrix/units/code.py", "src/driftmatrix/units/store.py",
          "src/driftmatrix/units/environment.py"}


@pytest.mark.parametrize("stage", ["train", "evaluate", "matrices", "estimates", "importance", "saliency"])
def test_the_code_deps_of_every_stage_that_keys_units_are_the_code_they_reach(stage):
    """The code (STAGE_CODE) of a stage that keys units (and cells) is exactly the files holding
    code that some catalog model's units (and cells) reach: one missing would let DVC skip the
    stage while keys changed; one more would rerun it for nothing."""
    from driftmatrix.models.catalog import REGISTRY

    forget()
    seen: dict = {}
    for spec in REGISTRY.values():
        seen.update(provenance.reach((*provenance.TRAIN_ROOTS, *provenance.model_roots(spec.build)), spec.build.cls)[0])
    keyed = {str(f.relative_to(REPO)) for f in provenance.code_files(seen)} | KEYING
    every = keyed | {str(f.relative_to(REPO)) for f in provenance.code_files(provenance.reach(provenance.SCORE_ROOTS)[0])}
    expected = every if stage in ("evaluate", "matrices", "estimates") else keyed  # they key cells too
    assert _files(provenance.STAGE_CODE[stage]) & every == expected, f"STAGE_CODE[{stage!r}] differs from reached code"


def test_the_check_itself_fails_on_a_missing_module():
    deps = [d for d in provenance.STAGE_CODE["train"] if d != "src/driftmatrix/learn/optim.py"]
    assert not _covered("src/driftmatrix/learn/optim.py", deps)


def test_repeated_seeds_are_a_one_line_error():
    from driftmatrix.config import effective_config

    with pytest.raises(ConfigError, match="seed 0 is listed twice"):
        effective_config(parse_params({"train": {"seeds": [0, 0]}, "models": {"MLP-S": {}}}), "MLP-S")


def test_a_cpu_driver_keys_gpu_ray_units_for_cuda():
    """The driver of a Ray cluster whose units ask for GPUs keys them for CUDA even without one."""
    env = environment.environment_of("fp32", "auto", 1, remote_gpus=True)
    assert (env.device, env.threads, env.precision) == ("cuda", None, "fp32")
    here = environment.environment_of("auto", "auto", 2)
    assert here.device == "cpu" and here.threads == 2 and here.libraries["torch"]
    assert "x86_64" in here.hardware or here.hardware  # recorded, never keyed
    assert "hardware" not in here.keyed()


def test_environment_round_trips_and_names_its_differences():
    env = Environment("fp32", "cpu", 1, {"torch": "2.14.1"}, "x86_64 AVX2")
    assert Environment.from_dict(json.loads(json.dumps(env.to_dict()))) == env
    other = Environment("bf16", "cpu", 2, {"torch": "2.14.1"})
    assert env.differences(other) == ["precision: 'fp32' != 'bf16'", "threads: 1 != 2"]


# --- on tiny data -------------------------------------------------------------------------------
def _tiny(tmp_path, tiny_params, **over):
    from testkit.pipeline import Paths, prepare

    params = tiny_params(tmp_path, train={"seeds": [0], "epochs": 1}, **over)
    paths = Paths(tmp_path / "out")
    prepare(params, paths, generate=True)
    return params, paths


def test_workers_refuse_a_unit_keyed_for_another_environment_or_code(tmp_path, tiny_params):
    import torch

    from driftmatrix.units.environment import resolve_environment
    from driftmatrix.units.experiment import Experiment, check_key, train_task

    params, paths = _tiny(tmp_path, tiny_params)
    env = resolve_environment(params, "MLP-S")
    exp = Experiment(params, "MLP-S", paths.slices, paths.features, env)
    unit = exp.plan.unit(0, 1)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(env.threads)
        check_key(exp, unit)  # the driver's own keys pass
        torch.set_num_threads(env.threads + 1)
        with pytest.raises(RuntimeError, match=f"threads: {env.threads} != {env.threads + 1}"):
            train_task(exp, unit)
        torch.set_num_threads(env.threads)
        from dataclasses import replace

        with pytest.raises(RuntimeError, match="its own plan"):
            check_key(exp, replace(unit, key="0123456789ab"))
    finally:
        torch.set_num_threads(threads)


def test_later_stages_key_with_the_recorded_environment(tmp_path, tiny_params, monkeypatch, mlflow_store):
    """matrices and status on a machine that would resolve another environment still find every
    cell: they read the environment the train stage recorded."""
    from driftmatrix.stages import matrices
    from driftmatrix.units import status

    from driftmatrix.units.store import ScoreStore
    from testkit.pipeline import train_and_evaluate

    params, paths = _tiny(tmp_path, tiny_params)
    train_and_evaluate(params, paths)
    recorded = checkpoints.CheckpointStore(paths.checkpoints, "MLP-S").environment()
    assert recorded["device"] == "cpu" and recorded["threads"] == 1 and recorded["hardware"]
    assert ScoreStore(paths.scores, "MLP-S").environment() == Environment.from_dict(recorded).to_dict()
    assert recorded["probe"] in ("", environment.environment_probe(params, "MLP-S"))  # the train stage's own
    record = checkpoints.CheckpointStore(paths.checkpoints, "MLP-S")
    some = record.record(record.keys()[0])
    assert some["environment"]["hardware"] and len(some["weights_digest"]) == 64

    elsewhere = Environment("bf16", "cpu", 7, {"torch": "other"})
    monkeypatch.setattr("driftmatrix.units.environment.resolve_environment", lambda *a, **k: elsewhere)
    m = matrices.read_scores(params, paths.slices, paths.scores)["MLP-S"]
    assert m.extra["missing_cells"] == 0 and m.extra["precision"] == recorded["precision"]
    (st,) = status.read_status(params, paths.slices, paths.checkpoints, paths.scores)
    assert st.to_train == 0 and st.cells_to_score == 0


def test_gpu_units_are_scored_in_the_stage_process(tmp_path, monkeypatch):
    """With a recorded CUDA environment and units to score, the evaluate stage starts no local worker
    processes (one CUDA context per CPU worker would be the result) and builds its experiment in-process."""
    import torch

    from driftmatrix.stages import evaluate as evaluation
    from driftmatrix.units.experiment import ExperimentInfo
    from testkit.slices import make_slices, write_slices

    rows, manifest, images = make_slices(k=3, per_slice=20, input_kind="image")
    for s in manifest["slices"]:
        s["hash"] = f"content of {s['label']}"
    slices = write_slices(tmp_path / "slices", rows, manifest, images)
    params, env = parse_params({"models": {"MLP-S": {}}}), Environment("fp32", "cuda", None, {})
    store = checkpoints.CheckpointStore(tmp_path / "ckpt", "MLP-S")
    store.write_environment(env.to_dict())
    for unit in ExperimentInfo(params, "MLP-S", slices, env).plan.units:  # every unit trained, none scored
        store.write(unit.key, {"w": torch.ones(2)}, {"model": "MLP-S"}, {"unit": {"key": unit.key}})

    class Built(Exception):
        pass

    def no_workers(*a, **k):
        raise AssertionError("local workers started for GPU units")

    def in_process(*a, **k):
        raise Built(a[-1].device)

    monkeypatch.setattr("driftmatrix.stages.train.start_workers", no_workers)
    monkeypatch.setattr("driftmatrix.units.experiment.Experiment", in_process)
    monkeypatch.setattr("driftmatrix.tracking.runs.configure_in_background", lambda cfg: None)
    with pytest.raises(Built, match="cuda"):
        evaluation.run(params, "MLP-S", slices, tmp_path / "ckpt", tmp_path / "scores")


# --- records -----------------------------------------------------------------------------------
def _write_unit(tmp_path) -> checkpoints.CheckpointStore:
    import torch

    store = checkpoints.CheckpointStore(tmp_path, "MLP-S")
    store.write("k1", {"w": torch.ones(2)}, {"model": "MLP-S"}, {"unit": {"key": "k1"}})
    return store


def test_a_record_cut_short_counts_as_missing(tmp_path):
    store = _write_unit(tmp_path)
    assert store.done("k1") and store.record("k1")["weights_digest"]
    record = store.folder("k1") / checkpoints.RECORD
    whole = record.read_text()
    for cut in ("", whole[: len(whole) // 2], "[]"):
        record.write_text(cut)
        assert not store.done("k1"), repr(cut)


def test_records_reach_the_disk_before_they_are_renamed_into_place(tmp_path, monkeypatch):
    synced, renamed = [], []
    real_fsync, real_replace = os.fsync, Path.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd)))
    monkeypatch.setattr(Path, "replace", lambda self, target: (renamed.append((str(self), len(synced))),
                                                               real_replace(self, target))[1])
    _write_unit(tmp_path)
    tmp_record = str(tmp_path / "MLP-S" / "k1" / (checkpoints.RECORD + ".tmp"))
    (position,) = [n for path, n in renamed if path == tmp_record]
    assert tmp_record in synced[:position]


def test_scores_of_other_weights_are_dropped():
    from driftmatrix.stages.evaluate import current_doc

    doc = {"cells": {"c": {"value": 1.0}}, "logged": {"run_id": "r"}, "weights_digest": "a"}
    assert current_doc(doc, "a") is doc
    fresh = current_doc(doc, "b")
    assert fresh["cells"] == {} and fresh["logged"] == {} and fresh["weights_digest"] == "b"


def test_relative_imports_count_as_imports(fake_package):
    (fake_package / "models").mkdir()
    (fake_package / "models" / "__init__.py").write_text("")
    (fake_package / "models" / "net.py").write_text("from . import parts\nfrom ..util import f\n"
                                                    "def build():\n    return parts.P + f()\n")
    (fake_package / "models" / "parts.py").write_text("P = 1\n")
    (fake_package / "util.py").write_text("def f():\n    pass\n")
    assert _modules(("driftmatrix.models.net.build",)) == {
        "driftmatrix.models.net", "driftmatrix.models.parts", "driftmatrix.util"}



# --- libraries beyond torch and numpy key only the units they compute --------------------------
KEYED_MODELS = ("MLP-S", "CNN-S", "Prior", "LogReg", "HistGBT", "LightGBM", "MLP-Tab", "FFN-S", "MiniLM-L6",
                "CLIP-B32", "DINOv2-S", "EffNet-L0")


def plan_keys(embed=None) -> dict[str, list[str]]:
    """Every unit key of :data:`KEYED_MODELS` on a two-slice manifest (no data needed)."""
    from driftmatrix.units.plan import model_plan

    params = parse_params({"dataset": {"name": "toy"}, "models": {m: {} for m in KEYED_MODELS},
                           **({"embed": embed} if embed else {})})
    manifest = {"dataset": {"name": "toy", "task": "binary", "input_kind": "image", "class_names": ["F", "M"]},
                "slices": [{"index": 0, "label": "2000", "hash": "h0"}, {"index": 1, "label": "2001", "hash": "h1"}]}
    env = Environment("fp32", "cpu", 1, {"torch": "t", "numpy": "n"})
    return {m: [u.key for u in model_plan(params, m, manifest, env).units] for m in KEYED_MODELS}


@pytest.mark.parametrize("library, rekeyed", [
    ("scipy", {"LogReg", "HistGBT"}),  # scikit-learn's solvers and losses
    ("scikit-learn", {"LogReg", "HistGBT", "LightGBM", "MLP-Tab"}),  # every tabular model's preprocessing
    ("transformers", {"FFN-S", "MiniLM-L6", "CLIP-B32"}),  # RoBERTa's token states, MiniLM, CLIP's tower
    ("tokenizers", {"FFN-S", "MiniLM-L6"}),  # the text encoders' token ids
    ("timm", {"DINOv2-S", "EffNet-L0"}),  # timm backbones
    ("lightgbm", {"LightGBM"}),
])
def test_a_library_version_rekeys_exactly_the_units_it_computes(monkeypatch, library, rekeyed):
    before = plan_keys()
    real = environment.package_version
    monkeypatch.setattr(environment, "package_version", lambda dist: "0.0.other" if dist == library else real(dist))
    after = plan_keys()
    assert {m for m in KEYED_MODELS if before[m] != after[m]} == rekeyed
    assert all(not set(before[m]) & set(after[m]) for m in rekeyed)  # every unit of theirs, not some
    assert plan_keys() == after  # the versions are read once: stable within the process


def test_library_versions_come_from_package_metadata():
    from importlib import metadata

    from driftmatrix.units.environment import model_libraries as library_versions

    assert environment.package_version("scipy") == metadata.version("scipy")
    assert environment.package_version("no-such-distribution-here") == "absent"
    assert library_versions("LogReg", {})["scipy"] == metadata.version("scipy")
    assert "scipy" not in library_versions("LightGBM", {}) and "scipy" not in library_versions("MLP", {})


def test_distributions_of_a_module_agree_with_importlib_for_every_installed_module():
    from importlib import metadata

    full = metadata.packages_distributions()
    assert {top: environment.distributions_of(top) for top in full} == full
    assert environment.distributions_of("sklearn") == ["scikit-learn"]
    assert environment.distributions_of("no_such_module_here") == []
    assert environment.model_libraries("Custom", {"estimator": "sklearn.svm.SVC"})["scikit-learn"] \
        == metadata.version("scikit-learn")
