"""`make ui`: bound to 127.0.0.1, and it prints the URL of the experiment's runs table."""

import re
import shutil
import subprocess
from pathlib import Path


from driftmatrix.tracking import ui

REPO = Path(__file__).resolve().parents[2]


def _ui_recipe() -> list[str]:
    """The commands `make ui` runs (dry run when make is installed, else the Makefile's recipe)."""
    if shutil.which("make"):
        out = subprocess.run(["make", "-n", "-C", str(REPO), "ui", "MLFLOW_TRACKING_URI="],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return [ln for ln in out.stdout.splitlines() if "mlflow ui" in ln or "tracking.ui" in ln]
    text = (REPO / "Makefile").read_text()
    recipe = re.search(r"^ui:.*\n((?:\t.*\n)+)", text, re.M).group(1)
    host = re.search(r"^UI_HOST := (\S+)", text, re.M).group(1)
    return [ln.replace("$(UI_HOST)", host) for ln in recipe.splitlines()]


def test_make_ui_binds_localhost_only_and_prints_the_runs_url():
    lines = _ui_recipe()
    server = next(ln for ln in lines if "mlflow ui" in ln)
    assert re.search(r"--host\s+127\.0\.0\.1\b", server) and "0.0.0.0" not in server
    helper = next(ln for ln in lines if "driftmatrix.tracking.ui" in ln)
    assert "--host 127.0.0.1" in helper
    store = re.search(r'--backend-store-uri\s+"?([^"\s]+)', server).group(1)
    assert f'--uri "{store}"' in helper or f"--uri {store}" in helper  # both look at one store


def test_runs_url_of_an_existing_experiment(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    exp_id = MlflowClient(tracking_uri=uri).create_experiment("tiny", artifact_location=str(tmp_path / "art"))
    params = tmp_path / "params.yaml"
    params.write_text("tracking:\n  experiment: tiny\n")
    line = ui.describe(uri, ui.experiment_name(params), "127.0.0.1", 5000)
    assert line == f"MLflow runs of experiment 'tiny': http://127.0.0.1:5000/#/experiments/{exp_id}/runs"
    assert "no experiment 'other'" in ui.describe(uri, "other", "127.0.0.1", 5000)


def test_a_missing_store_is_reported_not_created(tmp_path, capsys):
    db = tmp_path / "none.db"
    ui.main(["--uri", f"sqlite:///{db}", "--params", str(tmp_path / "absent.yaml"), "--port", "5001"])
    out = capsys.readouterr().out
    assert "http://127.0.0.1:5001" in out and "run `make repro` first" in out and not db.exists()
    assert ui.experiment_name(tmp_path / "absent.yaml") == "driftmatrix"
