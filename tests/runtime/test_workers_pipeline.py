"""Units in local worker processes (``runtime.workers``): the real train and evaluate stages on
tiny data give the same checkpoints and scores as in the stage process, and the evaluate stage
process itself never imports torch (its workers score; it tracks)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from driftmatrix.stages import evaluate as evaluation
from driftmatrix.stages import train as train_stage
from driftmatrix.config import to_raw
from testkit.pipeline import Paths, prepare

MODELS = {"MLP-S": {}}


def _scores(root: Path) -> dict[str, dict]:
    """unit key -> {cell key: value} of every score file under ``root``."""
    out = {}
    for path in sorted(p for p in root.glob("MLP-S/*.json") if p.name != "environment.json"):
        doc = json.loads(path.read_text())
        out[doc["unit"]["key"]] = {k: c["value"] for k, c in doc["cells"].items()}
    return out


def test_units_in_workers_give_the_stage_process_numbers_and_evaluate_never_imports_torch(tmp_path, tiny_params):
    here = tiny_params(tmp_path / "here", models=MODELS)
    there = tiny_params(tmp_path / "there", models=MODELS, runtime={"workers": 2})
    results = {}
    for name, params in (("here", here), ("there", there)):
        paths = Paths(tmp_path / name / "out")
        prepare(params, paths, generate=True)
        train_stage.run(params, "MLP-S", paths.slices, paths.checkpoints)
        if name == "here":
            evaluation.run(params, "MLP-S", paths.slices, paths.checkpoints, paths.scores)
        else:  # the stage as its own process, as `dvc repro` runs it
            params_file = tmp_path / name / "params.yaml"
            params_file.write_text(yaml.safe_dump(to_raw(params)))
            script = (
                "import sys\n"
                "from driftmatrix.stages import evaluate as evaluation\n"
                "from driftmatrix.config import load_params\n"
                f"evaluation.run(load_params({str(params_file)!r}), 'MLP-S', {str(paths.slices)!r}, "
                f"{str(paths.checkpoints)!r}, {str(paths.scores)!r})\n"
                "assert 'torch' not in sys.modules, 'the evaluate stage process imported torch'\n")
            done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr[-3000:]
        results[name] = (paths, _scores(paths.scores))
    (here_paths, here_scores), (there_paths, there_scores) = results["here"], results["there"]
    assert len(here_scores) == 2 * 4 and here_scores == there_scores  # 2 seeds x 4 cutoffs, every cell
    for key in here_scores:
        a = (here_paths.checkpoints / "MLP-S" / key / "model.safetensors").read_bytes()
        b = (there_paths.checkpoints / "MLP-S" / key / "model.safetensors").read_bytes()
        assert a == b, f"unit {key}: weights differ between the stage process and a worker"
