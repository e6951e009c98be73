"""Security: nothing the project loads can run code planted in a file.

- A crafted pickle in the artifact store or a checkpoint folder (in place of ``model.safetensors``,
  or beside it as ``model.pth`` / ``data/model.pth`` with an MLflow ``MLmodel``) is never executed by
  ``tracking.load_registered``, ``catalog.load_model_folder`` or ``CheckpointStore.load_state``;
  a replaced ``MLmodel`` (another flavour, other code, a pickled Python model) is refused before
  MLflow runs anything (``serving.verify``). No file of a registered version is a pickle, and
  ``mlflow.pyfunc.load_model`` plus ``predict`` run with every pickle loader patched to raise.
- Local encoder weight files of ``embed.sources`` (timm's architectures, EfficientNet-Lite0, a
  Hugging Face folder) are read without unpickling arbitrary objects.
- Every load under ``src/`` is safe by construction (an AST audit: ``torch.load`` only with
  ``weights_only=True``, ``np.load`` only with ``allow_pickle=False``, no pickle/joblib/dill loads,
  no MLflow flavour loaders, Hugging Face models only with ``weights_only=True``).
- ``driftmatrix data fetch`` (the command) refuses an ``ftp://`` URL and a traversing name; the
  function-level cases are in tests/data/test_fetch.py, and ``make ui`` binding 127.0.0.1 in
  tests/reporting/test_ui.py.
"""

from __future__ import annotations

import ast
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from driftmatrix.units import store as checkpoints

from driftmatrix.models import catalog
from driftmatrix.tracking import pyfunc as serving
from driftmatrix.tracking import runs as tracking
from driftmatrix.units import plan
from driftmatrix.features import encoders
from testkit.pipeline import Paths, prepare, train_and_evaluate

SRC = Path(__file__).resolve().parents[1] / "src"


class Payload:
    """Unpickling this creates ``marker`` (``open(marker, "w")``): the stand-in for any code."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def crafted(path: Path, marker: Path) -> Path:
    """A PyTorch checkpoint (zip + pickle) whose unpickling would create ``marker``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"weight": torch.zeros(2), "payload": Payload(marker)}, path)
    return path


def test_the_crafted_file_does_run_code_when_unpickled(tmp_path):
    """Control: the payload is live, so its marker staying absent below means something."""
    marker = tmp_path / "control"
    pickle.loads(pickle.dumps(Payload(marker)))
    assert marker.exists()
    marker.unlink()
    torch.load(crafted(tmp_path / "x.pth", marker), weights_only=False)
    assert marker.exists()


# --- registered models and checkpoints ------------------------------------------------------------
@pytest.fixture(scope="module")
def registered(tmp_path_factory, tiny_params):
    """One model (MLP-S, 2 cutoffs, 1 seed) trained, checkpointed, then logged and registered by
    its evaluate stage."""
    tmp = tmp_path_factory.mktemp("registry")
    params = tiny_params(tmp, synthetic={"years": 2}, train={"seeds": [0]},
                         tracking={"log_models": True, "register": True})
    saved = os.environ.get("MLFLOW_TRACKING_URI")
    os.environ["MLFLOW_TRACKING_URI"] = params.tracking.uri
    try:
        paths = Paths(tmp / "out")
        prepare(params, paths, generate=True)
        train_and_evaluate(params, paths, ["MLP-S"])
        yield tmp, params, paths
    finally:
        if saved is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = saved


def _unit(params, paths, cutoff):
    """The plan's MLP-S unit trained up to ``cutoff`` (seed 0): what a registry version is loaded by."""
    return plan.planned_unit(params, "MLP-S", cutoff, 0, paths.slices, paths.checkpoints)


PYTORCH_MLMODEL = ("flavors:\n  pytorch:\n    model_data: data\n    pickle_module_name: pickle\n"
                   "    serialization_format: pickle\n")


def plant_beside(folder: Path, marker: Path, mlmodel: bool = True) -> None:
    """Pickles where MLflow's flavours would look: ``model.pth``, ``data/model.pth``,
    ``python_model.pkl`` and (``mlmodel``) an ``MLmodel`` naming the pytorch flavour."""
    crafted(folder / "model.pth", marker)
    crafted(folder / "data" / "model.pth", marker)
    crafted(folder / "python_model.pkl", marker)
    if mlmodel:
        (folder / "MLmodel").write_text(PYTORCH_MLMODEL)


def test_a_crafted_pickle_in_a_checkpoint_folder_is_never_executed(registered, tmp_path):
    _, _, paths = registered
    store = checkpoints.CheckpointStore(paths.checkpoints, "MLP-S")
    key = store.keys()[0]
    folder = tmp_path / "ckpt" / "MLP-S" / key
    folder.parent.mkdir(parents=True)
    import shutil

    shutil.copytree(store.folder(key), folder)
    copy = checkpoints.CheckpointStore(tmp_path / "ckpt", "MLP-S")
    marker = tmp_path / "pwned"

    plant_beside(folder, marker)  # extra files are ignored: the weights still load
    assert catalog.load_model_folder(folder) is not None and copy.load_state(key)
    crafted(folder / "model.safetensors", marker)  # the weights themselves replaced by a pickle
    with pytest.raises(Exception, match=r"(?i)header|safetensor|deserializ"):
        copy.load_state(key)
    with pytest.raises(Exception, match=r"(?i)header|safetensor|deserializ"):
        catalog.load_model_folder(folder)
    assert not marker.exists()


def _logged_models(tmp: Path) -> list[Path]:
    """Every ``model`` folder in the artifact store (one per unit run)."""
    return sorted({p.parent for p in (tmp / "mlruns").rglob("MLmodel")})


def unpickles(data: bytes) -> bool:
    """Whether ``data`` is a pickle (or a zip holding one, as ``torch.save`` writes): its bytes parse
    as pickle opcodes up to STOP (``pickletools``; nothing is executed)."""
    import io
    import pickletools
    import zipfile

    if zipfile.is_zipfile(io.BytesIO(data)):
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            return any(unpickles(z.read(n)) for n in z.namelist())
    try:
        return any(op.name == "STOP" for op, _, _ in pickletools.genops(io.BytesIO(data)))
    except Exception:  # noqa: BLE001 - not a pickle stream
        return False


def test_the_pickle_detector_detects_pickles(tmp_path):
    assert unpickles(pickle.dumps({"a": [1, 2]})) and unpickles(pickle.dumps(Payload(tmp_path / "x")))
    assert unpickles(crafted(tmp_path / "x.pth", tmp_path / "m").read_bytes())
    assert not unpickles(b'{"format": "json"}') and not unpickles(b"flavors:\n  python_function: {}\n")
    assert not unpickles(b"channels:\n- conda-forge\ndependencies:\n- python=3.11\n")  # 'c' is an opcode too


def test_no_file_of_any_registered_version_unpickles(registered, tmp_path):
    """Every file of every version's ``model`` (downloaded through the registry) is no pickle: the
    weights are safetensors, everything else JSON, YAML or Python source."""
    from mlflow.tracking import MlflowClient

    tmp, params, _ = registered
    tracking.configure(params.tracking)
    client = MlflowClient()
    versions = client.search_model_versions("name = 'tiny.MLP-S'")
    assert len(versions) == 2
    for v in versions:
        folder = Path(mlflow_download(f"models:/tiny.MLP-S/{v.version}", tmp_path / str(v.version)))
        files = [p for p in folder.rglob("*") if p.is_file()]
        names = {str(p.relative_to(folder)) for p in files}
        assert {"MLmodel", "pyfunc_model.py", "artifacts/model.safetensors", "artifacts/model.json"} <= names
        assert [str(p.relative_to(folder)) for p in files if unpickles(p.read_bytes())] == []
        serving.verify(folder)


def mlflow_download(uri: str, dst: Path) -> str:
    import mlflow

    dst.mkdir(parents=True)
    return mlflow.artifacts.download_artifacts(uri, dst_path=str(dst))


def test_loading_and_predicting_never_call_pickle(registered, monkeypatch):
    """``mlflow.pyfunc.load_model`` by alias and ``predict``, with every pickle and cloudpickle
    loader replaced by one that raises."""
    import _pickle

    import cloudpickle
    import mlflow
    import numpy as np

    tmp, params, paths = registered
    tracking.configure(params.tracking)
    calls = []

    def refuse(*args, **kwargs):
        calls.append(args[:1])
        raise AssertionError("something unpickled while loading a registered model")

    for module in (pickle, _pickle, cloudpickle):
        for name in ("load", "loads", "Unpickler"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, refuse)
    monkeypatch.setattr(torch, "load", refuse)
    model = mlflow.pyfunc.load_model("models:/tiny.MLP-S@cutoff-1951")
    images = np.load(paths.slices / "images.npy", allow_pickle=False)[:4]
    assert model.predict(images).shape == (4, 2)
    assert tracking.load_registered(_unit(params, paths, "1951")) is not None
    assert calls == []


# Last of the registry tests: it tampers with the store the module's fixture made.
def test_a_crafted_pickle_in_the_artifact_store_is_never_executed(registered):
    tmp, params, paths = registered
    tracking.configure(params.tracking)
    unit = _unit(params, paths, "1950")
    assert tracking.load_registered(unit) is not None  # intact: loads
    logged = _logged_models(tmp)
    assert logged, "no logged models found in the artifact store"
    marker = tmp / "pwned"
    originals = {m: (m / "MLmodel").read_text() for m in logged}
    for model in logged:  # everywhere the store holds a model: pickles beside it ...
        plant_beside(model, marker, mlmodel=False)
    assert tracking.load_registered(unit) is not None  # ... are never read
    for crafted_mlmodel in (PYTORCH_MLMODEL,  # ... nor when its MLmodel is replaced: another flavour,
                            originals[logged[0]].replace("model_code_path: pyfunc_model.py",  # other code,
                                                         "model_code_path: evil.py"),
                            originals[logged[0]].replace("loader_module: mlflow.pyfunc.loaders.code_model",
                                                         "loader_module: mlflow.pyfunc.model\n    python_model: "
                                                         "python_model.pkl")):  # a pickled Python model
        for model in logged:
            (model / "MLmodel").write_text(crafted_mlmodel)
            (model / "evil.py").write_text(f"open({str(marker)!r}, 'w')\n")
        with pytest.raises(serving.NotAModel, match="refused before loading"):
            tracking.load_registered(unit)
    for model in logged:
        (model / "MLmodel").write_text(originals[model])
        crafted(model / "artifacts" / "model.safetensors", marker)  # ... and in place of its weights
    with pytest.raises(Exception, match=r"(?i)header|safetensor|deserializ"):
        tracking.load_registered(unit)
    assert not marker.exists()


# --- local encoder weight files (embed.sources) -----------------------------------------------------
TINY_TIMM = encoders.EncoderInfo("image", "timm", "test_vit.r160_in1k")


def test_timm_local_weight_files_load_weights_only(tmp_path):
    import timm
    from safetensors.torch import save_file

    state = timm.create_model(TINY_TIMM.source, pretrained=False, num_classes=0).state_dict()
    torch.save(state, tmp_path / "w.pth")
    save_file({k: v.contiguous() for k, v in state.items()}, str(tmp_path / "w.safetensors"))
    for name in ("w.pth", "w.safetensors"):
        model, mean, std = encoders._vision_backbone(TINY_TIMM, str(tmp_path / name))
        for key, value in model.state_dict().items():
            assert torch.equal(value, state[key]), (name, key)
        assert "state_dict" not in model.pretrained_cfg and len(mean) == 3


@pytest.mark.parametrize("info", [TINY_TIMM, encoders.EncoderInfo("image", "effnet-lite0", "tf_efficientnet_lite0")],
                         ids=["timm", "effnet-lite0"])
@pytest.mark.parametrize("name", ["weights.pth", "weights.bin", "weights.safetensors"])
def test_a_crafted_local_vision_weight_file_is_refused_not_executed(tmp_path, info, name):
    marker = tmp_path / "pwned"
    path = crafted(tmp_path / name, marker)
    with pytest.raises(ValueError, match="embed.sources: .* refused"):
        encoders._vision_backbone(info, str(path))
    with pytest.raises(ValueError, match="refused"):
        encoders.read_weights(path)
    assert not marker.exists()


def test_a_crafted_hugging_face_checkpoint_is_refused_not_executed(tmp_path):
    from transformers import BertConfig, BertModel

    folder = tmp_path / "tiny-bert"
    BertModel(BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=8)).save_pretrained(folder)
    for weights in folder.glob("*.safetensors"):
        weights.unlink()
    marker = tmp_path / "pwned"
    crafted(folder / "pytorch_model.bin", marker)
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        encoders.TextEncoder(str(folder), torch.device("cpu"))
    assert not marker.exists()


# --- every load under src/ is safe by construction ------------------------------------------------
FORBIDDEN = {("pickle", "load"), ("pickle", "loads"), ("pickle", "Unpickler"), ("cloudpickle", "load"),
             ("cloudpickle", "loads"), ("dill", "load"), ("dill", "loads"), ("joblib", "load"),
             ("pd", "read_pickle"), ("pandas", "read_pickle"), ("jit", "load"), ("torch", "package")}


def dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    return "?"


def keyword(call: ast.Call, name: str):
    for kw in call.keywords:
        if kw.arg == name and isinstance(kw.value, ast.Constant):
            return kw.value.value
    return None


def unsafe_loads(source: str, filename: str) -> list[str]:
    """Every load call in ``source`` that could unpickle (file:line and why)."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Call):
            continue
        name = dotted(node.func)
        parts = name.split(".")
        where = f"{filename}:{node.lineno} {name}"
        if tuple(parts[-2:]) in FORBIDDEN or parts[-1] in ("read_pickle", "Unpickler"):
            found.append(f"{where}: unpickles")
        elif name in ("torch.load", "torch.serialization.load") and keyword(node, "weights_only") is not True:
            found.append(f"{where}: without weights_only=True")
        elif name in ("np.load", "numpy.load") and keyword(node, "allow_pickle") is not False:
            found.append(f"{where}: without allow_pickle=False")
        elif parts[0] == "mlflow" and parts[-1] == "load_model" and not (
                name == "mlflow.pyfunc.load_model" and filename == "driftmatrix/tracking/pyfunc.py"):
            found.append(f"{where}: MLflow flavour loaders unpickle (serving.load checks a folder first)")
        elif parts[-1] == "from_pretrained" and parts[0].endswith("Model") and keyword(node, "weights_only") is not True:
            found.append(f"{where}: Hugging Face model without weights_only=True")
    return found


def test_no_load_under_src_can_unpickle():
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 20
    found = [hit for f in files for hit in unsafe_loads(f.read_text(), str(f.relative_to(SRC)))]
    assert found == []


def test_the_audit_flags_unsafe_loads():
    bad = ("import torch, pickle, numpy as np, joblib, mlflow\n"
           "torch.load(p)\ntorch.load(p, weights_only=False)\nnp.load(p, allow_pickle=True)\nnp.load(p)\n"
           "pickle.loads(b)\njoblib.load(p)\nmlflow.pytorch.load_model(u)\nAutoModel.from_pretrained(s)\n"
           "torch.jit.load(p)\n")
    assert len(unsafe_loads(bad, "bad.py")) == 9
    good = "torch.load(p, weights_only=True)\nnp.load(p, allow_pickle=False)\nAutoTokenizer.from_pretrained(s)\n"
    assert unsafe_loads(good, "good.py") == []


# --- the fetch command ----------------------------------------------------------------------------
@pytest.mark.parametrize("args, message", [
    (["--url", "ftp://example.org/All_Beauty.jsonl.gz"], "only http://, https:// and file:// URLs"),
    (["--category", "../../escape"], "is not a plain name"),
])
def test_the_fetch_command_refuses_ftp_and_traversing_names(tmp_path, args, message):
    dest = tmp_path / "data" / "amazon"
    out = subprocess.run([sys.executable, "-m", "driftmatrix", "data", "fetch", "amazon", "--dest", str(dest),
                          "--no-progress", *args], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(SRC)})
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
