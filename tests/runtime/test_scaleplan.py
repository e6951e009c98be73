"""The planner's schedule simulation on small cases checked by hand, and the units of a study."""

from __future__ import annotations

import pytest

from driftmatrix.config import parse_params
from driftmatrix.runtime.scaleplan import (PAPER, Shape, Unit, cpu_units, format_rows, gpu_units, plan, rows_for,
                                   shape_of, simulate)


def units(*specs, stage="train"):
    """Units from (hours, share) pairs, in submission order."""
    return [Unit(stage, "d", f"m{k}", 0, k, h, s) for k, (h, s) in enumerate(specs)]


def test_four_half_gpu_units_pack_two_at_a_time():
    s = simulate(units(*[(1.0, 0.5)] * 4), slots=1)
    assert s.makespan == pytest.approx(2.0)
    assert s.utilisation == pytest.approx(1.0)
    assert s.billed == pytest.approx(2.0)


def test_whole_gpu_units_leave_a_gpu_idle():
    s = simulate(units(*[(1.0, 1.0)] * 3), slots=2)
    assert s.makespan == pytest.approx(2.0)
    assert s.utilisation == pytest.approx(0.75)  # 3 GPU-hours of work, 4 billed


def test_longest_first_beats_submission_order():
    work = units((1.0, 1.0), (1.0, 1.0), (2.0, 1.0))
    assert simulate(work, 2, "fifo").makespan == pytest.approx(3.0)  # 1,1 | then 2
    assert simulate(work, 2, "lpt").makespan == pytest.approx(2.0)  # 2 | 1,1


def test_shares_that_do_not_fit_together_wait():
    # 0.75 and 0.5 cannot share one GPU: 1 h, then 1 h; a third of a GPU packs exactly three times
    assert simulate(units((1.0, 0.75), (1.0, 0.5)), 1).makespan == pytest.approx(2.0)
    thirds = simulate(units(*[(1.0, 1 / 3)] * 6), 1)
    assert thirds.makespan == pytest.approx(2.0) and thirds.utilisation == pytest.approx(1.0)


def test_backfill_lets_a_small_unit_pass_a_blocked_one():
    # FIFO: a 0.5 unit runs; the next 1.0 unit cannot start, but the 0.5 after it can (as in Ray)
    s = simulate(units((2.0, 0.5), (1.0, 1.0), (2.0, 0.5)), 1, "fifo")
    assert s.makespan == pytest.approx(3.0)  # [0,2] two halves, [2,3] the whole one


def test_multi_gpu_unit_waits_for_whole_gpus():
    s = simulate(units((1.0, 0.5), (1.0, 2.0)), 2, "fifo")
    assert s.makespan == pytest.approx(2.0)  # the 2-GPU unit needs both GPUs free
    assert s.busy == pytest.approx(2.5)


@pytest.mark.parametrize("share", [0, 1.5, 3])
def test_impossible_shares_are_rejected(share):
    with pytest.raises(ValueError):
        simulate(units((1.0, share)), 2)


def test_stages_run_one_after_the_other():
    work = units((1.0, 0.5), (1.0, 0.5)) + units((0.5, 1.0), stage="evaluate")
    stages = plan(work, 1)
    assert stages["train"].makespan == pytest.approx(1.0)
    assert stages["evaluate"].makespan == pytest.approx(0.5)
    row = rows_for({"d": work}, [1])[0]
    assert row.makespan == pytest.approx(1.5) and row.units == 2
    assert row.utilisation == pytest.approx((1.0 + 0.5) / 1.5)
    table = format_rows([row], price=2.0)
    assert "| d | 2 | 1 | 1.5 h (1.0 h + 30.0 min) | 100% | 1.5 | 1.5 | 3.00 |" in table


def test_gpu_units_add_up_to_the_authors_hours():
    cost = PAPER["amazon-reviews-2023"]
    shape = Shape("amazon-reviews-2023", ("A", "B", "C"), (0, 1, 2), (10, 20, 30), (15, 30, 45),
                  shares={"A": 0.25})
    work = gpu_units(shape, cost)
    train = [u for u in work if u.stage == "train"]
    assert len(train) == 3 * 3 * 3
    per_config = cost.train_hours / cost.configs
    assert sum(u.hours for u in train) == pytest.approx(9 * per_config)
    # cumulative training: cutoff 2 reads 60 rows, cutoff 0 reads 10
    a0 = {u.cutoff: u.hours for u in train if u.model == "A" and u.seed == 0}
    assert a0[2] / a0[0] == pytest.approx(6.0)
    assert {u.share for u in work if u.model == "A"} == {0.25}
    assert {u.share for u in work if u.model == "B"} == {1.0}
    assert sum(u.hours for u in work if u.stage == "evaluate") == pytest.approx(9 * cost.eval_hours / cost.configs)


def test_cpu_units_use_measured_rates():
    shape = Shape("d", ("A",), (0,), (100, 100), (150, 150), epochs={"A": 2})
    work = cpu_units(shape, {"A": (50.0, 300.0)})
    train = sorted(u.hours * 3600 for u in work if u.stage == "train")
    assert train == pytest.approx([2 * 100 / 50, 2 * 200 / 50])
    assert [u.hours * 3600 for u in work if u.stage == "evaluate"] == pytest.approx([1.0, 1.0])
    with pytest.raises(ValueError, match="no measured CPU throughput"):
        cpu_units(shape, {})


def test_shape_of_a_preset_reads_runtime_shares():
    params = parse_params({
        "dataset": {"name": "yearbook", "source": "yearbook", "path": "x"},
        "train": {"seeds": [0, 1]},
        "models": {"MLP-S": {}, "CNN-L": {"epochs": 3}},
        "runtime": {"num_gpus": 0.125, "overrides": {"CNN-L": {"num_gpus": 0.25}}},
    })
    shape = shape_of(params)
    assert len(shape.train_rows) == 104 and sum(shape.rows) == 37_921
    assert shape.shares == {"MLP-S": 0.125, "CNN-L": 0.25}
    assert shape.epochs == {"MLP-S": 10, "CNN-L": 3}
    assert shape_of(params, share=1.0).shares == {"MLP-S": 1.0, "CNN-L": 1.0}
    manifest = {"slices": [{"n": 10, "n_train": 7}, {"n": 20, "n_train": 14}]}
    assert shape_of(params, manifest).train_rows == (7, 14)


def test_plan_command_on_the_paper_preset_reproduces_the_authors_hours():
    from pathlib import Path

    from typer.testing import CliRunner

    from driftmatrix.cli import app

    preset = Path(__file__).resolve().parents[2] / "presets" / "yearbook.yaml"
    result = CliRunner().invoke(app, ["plan", "-p", str(preset), "--share", "1", "-n", "1", "-n", "8",
                                      "--slices", "/nonexistent"])
    assert result.exit_code == 0, result.output
    # one unit per GPU on one GPU: the authors' 23.7 + 9.3 A100 hours, fully used
    assert "| yearbook | 10,920 | 1 | 33.0 h (23.7 h + 9.3 h) | 100% | 33.0 | 33.0 | 66.00 |" in result.output
    assert "| yearbook | 10,920 | 8 |" in result.output


def test_cpu_scale_needs_a_known_dataset_size():
    from driftmatrix.config import ConfigError

    params = parse_params({"dataset": {"name": "arxiv", "source": "arxiv", "path": "x", "task": "multilabel"},
                           "models": {"FFN-S": {}}})
    assert len(shape_of(params).train_rows) == 26  # the GPU scale only needs relative sizes
    with pytest.raises(ConfigError, match="arxiv: dataset size unknown"):
        shape_of(params, need_rows=True)
    assert sum(shape_of(params, rows=2600, need_rows=True).rows) == 2600
