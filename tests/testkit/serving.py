"""Helpers of the serving tests: what the evaluate stage computes for given rows, and `mlflow
models serve` on loopback (a started server, JSON requests)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def served(model_uri: str, tracking_uri: str, log_path: Path, cwd: Path | None = None):
    """``mlflow models serve -m model_uri`` on 127.0.0.1 (the venv's ``bin`` first on PATH: MLflow
    starts uvicorn), answering ``/ping``; yields its base URL and stops it with its worker."""
    port = free_port()
    mlflow_cli = Path(sys.executable).with_name("mlflow")
    log = open(log_path, "w")
    proc = subprocess.Popen([str(mlflow_cli), "models", "serve", "-m", model_uri, "--env-manager", "local",
                             "-h", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT, cwd=cwd,
                            env={**os.environ, "MLFLOW_TRACKING_URI": tracking_uri,
                                 "PATH": f"{mlflow_cli.parent}{os.pathsep}{os.environ.get('PATH', '')}"},
                            start_new_session=True)
    try:
        deadline = time.time() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=5) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None, log_path.read_text()[-3000:]
            assert time.time() < deadline, "server did not answer /ping in 180 s"
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)  # the server and its uvicorn worker
        proc.wait(timeout=60)
        log.close()


def post(url: str, body: dict) -> tuple[int, dict]:
    """(HTTP status, JSON answer) of a POST to ``url``; errors answer too."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def in_process(params, paths, model: str, cutoff: int, seed: int, rows: np.ndarray, logits: bool = False) -> np.ndarray:
    """What the evaluate stage computes for ``rows``: its Experiment, its checkpoint, its batches
    (class probabilities, or the network's outputs with ``logits``)."""
    from driftmatrix.units import store as checkpoints
    from driftmatrix.tracking import pyfunc as serving
    from driftmatrix.features import transform
    from driftmatrix.learn import fit as fit_loop
    from driftmatrix.units import experiment
    exp = experiment.Experiment(params, model, paths.slices, paths.features)
    unit = exp.plan.unit(seed, cutoff)
    net = exp.load_unit(checkpoints.CheckpointStore(paths.checkpoints, model), unit.key)
    out = fit_loop.predict(net, exp.inputs, batch_size=exp.cfg.eval_batch_size, precision=exp.cfg.precision, rows=rows)
    return out if logits else transform.outputs_to_scores(out, exp.meta.task)


def held_out(paths, cutoff: int):
    """The slices' rows and the rows every cell of a ``cutoff`` unit scores (its held-out rows up
    to the cutoff, every row after it), in row order."""
    from driftmatrix.learn.score import eval_mask
    from driftmatrix.data.slicing import load_slices

    rows, _, _ = load_slices(paths.slices)
    ids, split = rows["slice"].to_numpy(), rows["split"].to_numpy()
    return rows, np.flatnonzero(np.any([eval_mask(ids, split, cutoff, j) for j in range(ids.max() + 1)], axis=0))
