"""The pure parts of the anchor benchmark (bench/anchor.py, bench/authors.py); no timing here."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import anchor  # noqa: E402
import authors  # noqa: E402


def test_authors_matrix_is_read_in_slice_order_as_percent(tmp_path):
    raw = {"1951": {"1950": {"accuracy": 0.75}, "1951": {"accuracy": 0.5}},
           "1950": {"1950": {"accuracy": 1.0}, "1951": {"accuracy": 0.25, "loss": 0.7}}}
    path = tmp_path / "drift_matrix.json"
    path.write_text(json.dumps(raw))
    slices, M = authors.read_matrix(path)
    assert slices == ["1950", "1951"]
    np.testing.assert_allclose(M, [[100.0, 25.0], [75.0, 50.0]])


def test_authors_missing_cells_stay_nan(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"1950": {"1950": {"accuracy": 0.5}, "1952": {"loss": 1.0}}}))
    slices, M = authors.read_matrix(path)
    assert slices == ["1950", "1952"]
    assert M[0, 0] == 50.0 and np.isnan(M[0, 1]) and np.isnan(M[1]).all()


def test_authors_side_unavailable_names_the_missing_checkout(tmp_path):
    a = authors.locate(tmp_path / "nowhere", tmp_path / "venv")
    reason = authors.unavailable(a)
    assert reason and "nowhere" in reason and "DRIFT_AUTHORS_SRC" in reason


def test_authors_command_is_their_preset_on_cpu_with_wandb_off(tmp_path):
    a = authors.Authors(src=tmp_path, python=tmp_path / "python")
    cmd = authors.command(a, "CNN-S", 3, tmp_path / "runs", threads=2)
    assert cmd[cmd.index("run") + 1].endswith("yearbook-conference/cnn_s.json")
    assert cmd[cmd.index("--seed") + 1] == "3"
    assert "runtime.device=cpu" in cmd and "runtime.num_threads=2" in cmd
    assert cmd[cmd.index("--wandb-mode") + 1] == "disabled"


def test_anchor_params_set_the_anchor_experiment(tmp_path):
    base = yaml.safe_load((BENCH.parent / "params.yaml").read_text())
    before = json.dumps(base, sort_keys=True, default=str)
    p = anchor.anchor_params(base, tmp_path / "raw", tmp_path, "CNN-S", 5, "bf16")
    assert p["dataset"]["source"] == "yearbook"
    assert p["dataset"]["path"] == str(tmp_path / "raw" / anchor.SOURCE_DIR)
    assert p["train"]["seeds"] == [0, 1, 2, 3, 4]
    assert (p["train"]["epochs"], p["train"]["batch_size"], p["train"]["lr"]) == (10, 64, 5e-4)
    assert p["train"]["precision"] == "bf16" and p["train"]["device"] == "cpu"
    assert list(p["models"]) == ["CNN-S"]
    assert p["tracking"]["log_models"] and p["tracking"]["register"]
    assert p["tracking"]["uri"] == f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert json.dumps(base, sort_keys=True, default=str) == before  # the repository's params untouched


def test_cell_agreement_counts_cells_within_the_reference_seed_std():
    ref = np.full((3, 2, 2), np.nan)
    ref[:, 0, 0] = [50.0, 52.0, 54.0]  # std 2
    ref[:, 0, 1] = 60.0                # std 0
    close = np.full((3, 2, 2), np.nan)
    close[:, 0, 0], close[:, 0, 1] = 53.5, 60.0  # |diff| 1.5 <= 2; 0 <= 0
    a = anchor.cell_agreement(ref, close)
    assert a["cells"] == 2 and a["within_std"] == 1.0 and a["max_abs_diff"] == pytest.approx(1.5)
    far = close.copy()
    far[:, 0, 0] = 57.0  # |diff| 5 > 2 std = 4
    b = anchor.cell_agreement(ref, far)
    assert b["within_std"] == 0.5 and b["within_2std"] == 0.5
    assert 0.5 < b["expected_within_std_if_same"] < 1.0


def test_welch_t_sign_and_minimum_sizes():
    assert anchor.welch_t([1.0], [2.0, 3.0]) is None
    assert anchor.welch_t([10.0, 11.0, 12.0], [1.0, 2.0, 3.0]) > 5
    assert anchor.welch_t([1.0, 2.0, 3.0], [10.0, 11.0, 12.0]) < -5
