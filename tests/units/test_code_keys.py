"""Code keys at function granularity (driftmatrix.units.code): on a copy of the package source, an
edit changes the keys of exactly the units and cells whose computation reaches it; and every
function that runs while a unit trains or its cells are scored is in its key."""

from __future__ import annotations

import ast
import shutil

import pytest

from driftmatrix.units import code as provenance
from driftmatrix.models.catalog import REGISTRY
from testkit.codekeys import SRC, forget, insert_statement, reword_reports, untraced


@pytest.fixture
def pkg(tmp_path, monkeypatch):
    """A copy of the package source, digested instead of the real one (which is never edited)."""
    copy = tmp_path / "driftmatrix"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    monkeypatch.setattr(provenance, "PACKAGE_DIR", copy)
    forget()
    yield copy
    forget()


def all_keys() -> dict[str, str]:
    """The code key of every catalog model's units, and the cells' scoring code."""
    forget()
    keys = {name: provenance.unit_code(spec.build) for name, spec in REGISTRY.items()}
    return {**keys, "<cells>": provenance.code_key(provenance.SCORE_ROOTS)}


def changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {k for k in before if before[k] != after[k]}


def test_rewording_every_log_message_changes_no_key(pkg):
    before = all_keys()
    count = sum(reword_reports(path) for path in pkg.rglob("*.py"))
    assert count > 40  # the package's log lines, warnings and stderr prints
    assert "(reworded) " in (pkg / "stages" / "train.py").read_text() and "(reworded) " in (pkg / "stages" / "evaluate.py").read_text()
    assert changed(before, all_keys()) == set()


def test_a_log_line_added_inside_the_training_loop_changes_no_key(pkg):
    before = all_keys()
    insert_statement(pkg / "learn" / "fit.py", "fit", 'log.info("fitting %s rows", len(train_idx))')
    assert changed(before, all_keys()) == set()


def test_adding_a_catalog_variant_changes_no_existing_key(pkg):
    before = all_keys()
    catalog = pkg / "models" / "catalog.py"
    text = catalog.read_text()
    for anchor, line in (('    "CNN-L":', '    "CNN-XS": ("CNN", "CNN", {"channels": (8, 16)}),\n'),
                         ('    "TX-L":', '    "TX-XS": ("Transformer", "TextTransformer", {"width": 32, "heads": 2, '
                                       '"layers": 1, "ff": 64}),\n'),
                         ('    "LightGBM":', '    "LogReg-L1": ("Linear", "LogReg", TABULAR_DEFAULTS, "L1 logistic"),\n')):
        assert text.count(anchor) == 1
        text = text.replace(anchor, line + anchor)
    catalog.write_text(text + '\nregister(ModelSpec(name="Prior-2", family=BASELINE_FAMILY, modality="any", '
                              'inputs="none", build=Builder("driftmatrix.models.heads")))\n')
    assert changed(before, all_keys()) == set()


def test_a_statement_in_one_image_builder_class_changes_only_its_models(pkg):
    before = all_keys()
    insert_statement(pkg / "models" / "image.py", "CNN.__init__", "in_channels = int(in_channels)")
    assert changed(before, all_keys()) == {"CNN-S", "CNN-M", "CNN-L"}
    insert_statement(pkg / "models" / "image.py", "ViT.forward", "x = x.contiguous()")
    assert changed(before, all_keys()) == {"CNN-S", "CNN-M", "CNN-L", "ViT-S", "ViT-M", "ViT-L"}


def test_a_statement_at_the_top_of_the_training_loop_changes_every_unit(pkg):
    before = all_keys()
    insert_statement(pkg / "learn" / "fit.py", "fit", "seed = int(seed)")
    assert changed(before, all_keys()) == set(before)  # the cells' too: scoring builds the experiment


def test_a_statement_in_the_scoring_path_changes_the_cells_only(pkg):
    before = all_keys()
    insert_statement(pkg / "learn" / "score.py", "forward_stats", "outputs = outputs")
    assert changed(before, all_keys()) == {"<cells>"}


def test_editing_mlflow_orchestration_and_report_code_changes_no_key(pkg):
    """A statement at the top of every function of the MLflow, serving, orchestration and report
    modules, and of the stages' drivers (evaluation.run, training.run ...)."""
    before = all_keys()
    modules = ["tracking", "runtime", "stages", "cli.py", "units/status.py", "reporting", "analysis", "estimate",
               "explain", "audit"]
    edited = 0
    for entry in modules:
        for path in sorted((pkg / entry).rglob("*.py")) if (pkg / entry).is_dir() else [pkg / entry]:
            for node in [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)][::-1]:
                qual = _qualname(ast.parse(path.read_text()), node)
                if qual:
                    insert_statement(path, qual, "_orchestration = None")
                    edited += 1
    for qual in ("unit_record", "training_data"):
        insert_statement(pkg / "units" / "experiment.py", qual, "_orchestration = None")
    assert edited > 300
    assert changed(before, all_keys()) == set()


def _qualname(tree: ast.Module, target: ast.FunctionDef) -> str | None:
    """``f`` or ``Class.f`` for a module-level function or method (None for nested ones)."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.lineno == target.lineno:
            return node.name
        for sub in getattr(node, "body", []) if isinstance(node, ast.ClassDef) else []:
            if isinstance(sub, ast.FunctionDef) and sub.lineno == target.lineno:
                return f"{node.name}.{sub.name}"
    return None


def test_a_class_defined_by_a_dispatch_table_keeps_other_models_out():
    forget()
    seen, _ = provenance.reach((*provenance.TRAIN_ROOTS, *provenance.model_roots(REGISTRY["MLP-S"].build)),
                               REGISTRY["MLP-S"].build.cls)
    image = {name for module, name in seen if module == "driftmatrix.models.image"}
    assert "MLP" in image and "build" in image and not image & {"CNN", "ResNet", "ViT", "EncoderBlock"}
    assert not any(module == "driftmatrix.models.catalog" and name.isupper() for module, name in seen)  # no tables


@pytest.mark.parametrize("model", ["MLP-S", "CNN-S", "Prior"])
def test_every_function_that_trains_or_scores_a_unit_is_in_its_keys(tmp_path, tiny_params, model):
    """Under-approximation is a bug: trace one unit trained and its cells scored, and check that
    each package function that ran is a definition its unit key or its cells' key digests."""
    from testkit.pipeline import Paths, prepare

    params = tiny_params(tmp_path, train={"seeds": [0], "epochs": 1}, models={model: {}})
    paths = Paths(tmp_path / "out")
    prepare(params, paths, generate=True)
    assert untraced(params, paths, model) == set()


# --- estimators named by import path --------------------------------------------------------------
EST = '''from sklearn.linear_model import LogisticRegression

from mylib.util import scale


class MyEst(LogisticRegression):
    def fit(self, X, y, sample_weight=None):
        return super().fit(X * scale(1.0), y, sample_weight)
'''


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project folder on sys.path holding ``mylib`` (an estimator and what it imports)."""
    lib = tmp_path / "proj" / "mylib"
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text("")
    (lib / "est.py").write_text(EST)
    (lib / "util.py").write_text("FACTOR = 1.0\n\n\ndef scale(x):\n    return x * FACTOR\n")
    (lib / "other.py").write_text("def unused():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path / "proj"))
    forget()
    yield lib
    forget()


def test_a_project_estimator_is_keyed_by_its_code_and_what_it_imports_from_the_project(project):
    from driftmatrix.models.catalog import Builder

    custom = Builder("driftmatrix.models.tabular", "Custom")

    def keys():
        return {**all_keys(), "MyEst": provenance.unit_code(custom, "mylib.est.MyEst")}

    before = keys()
    assert before["MyEst"] != provenance.unit_code(custom, "")  # its own code is in the key
    (project / "est.py").write_text("# a comment\n" + EST.replace("class MyEst", '"""doc"""\n\n\nclass MyEst'))
    (project / "other.py").write_text("def unused():\n    return 2\n")
    assert changed(before, keys()) == set()
    (project / "util.py").write_text("FACTOR = 2.0\n\n\ndef scale(x):\n    return x * FACTOR\n")
    assert changed(before, keys()) == {"MyEst"}
    before = keys()
    (project / "est.py").write_text(EST.replace("X * scale(1.0)", "X * scale(0.5)"))
    assert changed(before, keys()) == {"MyEst"}


def test_an_installed_estimator_is_keyed_by_its_version_not_its_source():
    from driftmatrix.models.catalog import Builder
    from driftmatrix.units.environment import model_libraries as library_versions

    custom = Builder("driftmatrix.models.tabular", "Custom")
    forget()
    assert provenance.unit_code(custom, "sklearn.ensemble.GradientBoostingClassifier") == provenance.unit_code(custom)
    assert library_versions("Custom", {"estimator": "sklearn.ensemble.GradientBoostingClassifier"})["scikit-learn"]


def test_a_project_estimator_outside_the_train_stages_deps_is_named(project, monkeypatch):
    monkeypatch.chdir(project.parent)
    dvc = project.parent / "dvc.yaml"
    dvc.write_text("stages:\n  train:\n    foreach: ${models}\n    do:\n      cmd: x\n      deps:\n        - src/custom_models\n")
    assert provenance.undeclared("mylib.est.MyEst") == ["mylib/est.py", "mylib/util.py"]
    assert provenance.undeclared("sklearn.ensemble.GradientBoostingClassifier") == []
    dvc.write_text(dvc.read_text() + "        - mylib\n")
    assert provenance.undeclared("mylib.est.MyEst") == []
