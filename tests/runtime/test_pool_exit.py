"""A stage that ran units in local worker processes ends cleanly: no pool manager thread outlives
the map, so the interpreter's exit hook cannot race it on a closing pipe ("Exception ignored in:
<module 'threading'> ... OSError: [Errno 9] Bad file descriptor" after a train stage)."""

from __future__ import annotations

import concurrent.futures.process as cfp
import subprocess
import sys
from dataclasses import dataclass

import yaml

from driftmatrix.config import to_raw
from driftmatrix.runtime.executor import LocalExecutor
from driftmatrix.config import RuntimeConfig
from testkit.pipeline import Paths, prepare


@dataclass(frozen=True)
class NoContext:
    def build(self):
        return None


def identity(ctx, item):
    return item


def _live_managers() -> list:
    """Pool manager threads whose wakeup pipe the exit hook would still write to."""
    return [t for t, wakeup in list(cfp._threads_wakeups.items()) if t.is_alive() or not wakeup._closed]


def test_no_pool_manager_thread_outlives_a_finished_map():
    ex = LocalExecutor(RuntimeConfig(workers=2), progress=False)
    assert dict(ex.map(identity, NoContext(), range(6))) == {k: k for k in range(6)}
    assert _live_managers() == []


def test_no_pool_manager_thread_outlives_a_map_stopped_early():
    ex = LocalExecutor(RuntimeConfig(workers=2), progress=False)
    results = ex.map(identity, NoContext(), range(6))
    assert next(results)[0] in range(6)
    results.close()
    assert _live_managers() == []


def test_train_stage_with_two_local_workers_ends_without_tracebacks(tmp_path, tiny_params):
    params = tiny_params(tmp_path, models={"ViT-S": {}}, runtime={"workers": 2})
    paths = Paths(tmp_path / "outputs")
    prepare(params, paths, generate=True)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(to_raw(params)))
    done = subprocess.run([sys.executable, "-m", "driftmatrix", "train", "-m", "ViT-S", "-p", "params.yaml"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "train ViT-S: 8/8 done" in done.stderr            # 2 seeds x 4 cutoffs, in the workers
    assert len(list((paths.checkpoints / "ViT-S").glob("*/model.safetensors"))) == 8
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr[-3000:]
