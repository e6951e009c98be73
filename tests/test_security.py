"""Security: nothing the project loads can run code planted in a file.

- A crafted pickle in the artifact store or a checkpoint folder (in place of ``model.safetensors``,
  or beside it as ``model.pth`` / ``data/model.pth`` with an MLflow ``MLmodel``) is never executed by
  ``tracking.load_registered``, ``checkpoints.load_model_folder`` or ``CheckpointStore.load_state``.
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

from driftmatrix import checkpoints, tracking, training
from driftmatrix.features import encoders
from driftmatrix.pipeline import Paths, prepare, train_and_evaluate

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


def plant_beside(folder: Path, marker: Path) -> None:
    """Pickles where MLflow's pytorch flavour would look: ``model.pth``, ``data/model.pth``, ``MLmodel``."""
    crafted(folder / "model.pth", marker)
    crafted(folder / "data" / "model.pth", marker)
    (folder / "MLmodel").write_text("flavors:\n  pytorch:\n    model_data: data\n    pickle_module_name: pickle\n"
                                    "    serialization_format: pickle\n")


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
    assert checkpoints.load_model_folder(folder) is not None and copy.load_state(key)
    crafted(folder / "model.safetensors", marker)  # the weights themselves replaced by a pickle
    with pytest.raises(Exception, match=r"(?i)header|safetensor|deserializ"):
        copy.load_state(key)
    with pytest.raises(Exception, match=r"(?i)header|safetensor|deserializ"):
        checkpoints.load_model_folder(folder)
    assert not marker.exists()


def test_a_crafted_pickle_in_the_artifact_store_is_never_executed(registered):
    tmp, params, _ = registered
    tracking.configure(params.tracking)
    cutoff = "1950"
    assert tracking.load_registered("tiny", "MLP-S", cutoff) is not None  # intact: loads
    logged = [p for p in (tmp / "mlruns").rglob("model.safetensors")]
    assert logged, "no logged weights found in the artifact store"
    marker = tmp / "pwned"
    for weights in logged:  # everywhere the store holds a model: pickles beside it ...
        plant_beside(weights.parent, marker)
    assert tracking.load_registered("tiny", "MLP-S", cutoff) is not None  # ... are never read
    for weights in logged:  # ... and in place of its weights
        crafted(weights, marker)
    with pytest.raises(Exception, match=r"(?i)header|safetensor|deserializ"):
        tracking.load_registered("tiny", "MLP-S", cutoff)
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
        elif parts[0] == "mlflow" and parts[-1] == "load_model":
            found.append(f"{where}: MLflow flavour loaders unpickle")
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
