"""Unit and cell identity: keyed by exactly what they read (driftmatrix.units.plan, pure)."""

import numpy as np
import pytest

from driftmatrix.config import ConfigError, TrainConfig, replace
from driftmatrix.learn.fit import window_train_rows
from driftmatrix.units.environment import Environment
from driftmatrix.units.plan import plan_model
from driftmatrix.config import Window, parse_window

IDENTITY = {"model": "MLP-S", "description": "mlp"}


def slices(*hashes, start=1950):
    return [{"label": str(start + k), "hash": h} for k, h in enumerate(hashes)]


ENV = {"precision": "fp32", "device": "cpu", "threads": 1, "libraries": {"torch": "2.14.1", "numpy": "2.4.6"}}


def keys(cfg, sl, identity=IDENTITY, **keyed):
    keyed = {"code": "c0", "env": ENV, **keyed}
    return {(u.seed, u.cutoff): u.key for u in plan_model("d", "MLP-S", "MLP", identity, cfg, sl, **keyed).units}


def test_appending_a_slice_changes_no_earlier_unit_and_adds_one_per_seed():
    cfg = TrainConfig(seeds=(0, 1))
    before, after = keys(cfg, slices("a", "b", "c")), keys(cfg, slices("a", "b", "c", "d"))
    assert set(after) - set(before) == {(0, "1953"), (1, "1953")}
    assert all(after[k] == v for k, v in before.items())


def test_adding_a_seed_adds_only_its_units():
    before = keys(TrainConfig(seeds=(0, 1)), slices("a", "b"))
    after = keys(TrainConfig(seeds=(0, 1, 2)), slices("a", "b"))
    assert {k: v for k, v in after.items() if k[0] != 2} == before and len(after) == 6


def test_settings_that_do_not_change_numbers_do_not_change_keys():
    base = TrainConfig()
    same = [replace(base, eval_batch_size=1024), replace(base, device="cuda"), replace(base, seeds=(0, 1, 7))]
    for cfg in same:
        k = keys(cfg, slices("a", "b"))
        assert all(k[s] == v for s, v in keys(base, slices("a", "b")).items() if s in k)
    for cfg in (replace(base, epochs=3), replace(base, lr=1e-3)):
        assert set(keys(cfg, slices("a", "b")).values()).isdisjoint(keys(base, slices("a", "b")).values())
    assert set(keys(base, slices("a", "b"), {**IDENTITY, "description": "wider"}).values()).isdisjoint(
        keys(base, slices("a", "b")).values())


def test_late_rows_in_slice_j_change_exactly_the_units_whose_window_holds_j():
    for window, changed in (("cumulative", {"1951", "1952", "1953"}), ("single", {"1951"}),
                            ({"sliding": 2}, {"1951", "1952"})):
        cfg = TrainConfig(seeds=(0,), window=window)
        a, b = keys(cfg, slices("a", "b", "c", "d")), keys(cfg, slices("a", "B", "c", "d"))
        assert {c for (_, c), k in a.items() if b[(0, c)] != k} == changed, window


def test_cells_key_by_unit_slice_content_and_evaluation_set():
    plan = plan_model("d", "MLP-S", "MLP", IDENTITY, TrainConfig(seeds=(0,)), slices("a", "b", "c"))
    unit = plan.unit(0, 1)
    cells = plan.cells(unit, ["a", "b", "c"])
    assert [c.evalset for c in cells] == ["test", "test", "all"]
    assert len({c.key for c in cells}) == 3
    assert plan.cells(unit, ["a", "b", "C"])[:2] == cells[:2] and plan.cells(unit, ["a", "b", "C"])[2] != cells[2]


def test_windows_train_on_exactly_the_rows_they_name():
    slice_ids = np.repeat(np.arange(5), 4)
    split = np.tile(["train", "train", "train", "test"], 5)
    for window, expect in ((Window(), [0, 1, 2, 3]), (Window("single"), [3]), (Window("sliding", 2), [2, 3])):
        rows = window_train_rows(slice_ids, split, window.slices(3))
        assert sorted(set(slice_ids[rows])) == expect and (split[rows] == "train").all()
        assert len(rows) == 3 * len(expect)
    assert list(Window("sliding", 3).slices(1)) == [0, 1]


@pytest.mark.parametrize("value", ["rolling", {"sliding": 0}, {"sliding": "x"}, {"fixed": 2}])
def test_bad_windows_are_named_errors(value):
    with pytest.raises(ConfigError, match="window"):
        parse_window(value)
    assert parse_window("sliding-4") == Window("sliding", 4) == parse_window({"sliding": 4})


def test_the_window_is_keyed_by_the_rows_it_spans_not_by_its_name():
    """cumulative -> {sliding: 5}: cutoffs 0-4 train on identical rows, so they keep their keys."""
    sl = slices(*"abcdefgh")
    cumulative, sliding = keys(TrainConfig(seeds=(0,)), sl), keys(TrainConfig(seeds=(0,), window={"sliding": 5}), sl)
    assert [c for (_, c), k in cumulative.items() if sliding[(0, c)] == k] == [str(1950 + i) for i in range(5)]


def test_code_and_environment_key_units_but_hardware_does_not():
    base = keys(TrainConfig(seeds=(0,)), slices("a", "b"))
    changed = [{"code": "c1"}, {"env": {**ENV, "precision": "bf16"}}, {"env": {**ENV, "device": "cuda", "threads": None}},
               {"env": {**ENV, "threads": 2}}, {"env": {**ENV, "libraries": {"torch": "2.13.0", "numpy": "2.4.6"}}}]
    for change in changed:
        assert set(keys(TrainConfig(seeds=(0,)), slices("a", "b"), **change).values()).isdisjoint(base.values()), change
    env = Environment.from_dict({**ENV, "hardware": "x86_64 AVX512"})
    assert keys(TrainConfig(seeds=(0,)), slices("a", "b"), env=env.keyed()) == base


def test_cells_key_by_how_they_are_scored():
    def cell_keys(scoring):
        plan = plan_model("d", "MLP-S", "MLP", IDENTITY, TrainConfig(seeds=(0,)), slices("a", "b"), scoring=scoring)
        return {c.key for c in plan.cells(plan.unit(0, 1), ["a", "b"])}

    base = cell_keys({"metric": "accuracy", "format": 1, "code": "s0"})
    for other in ({"metric": "auc", "format": 1, "code": "s0"}, {"metric": "accuracy", "format": 2, "code": "s0"},
                  {"metric": "accuracy", "format": 1, "code": "s1"}):
        assert cell_keys(other).isdisjoint(base)
