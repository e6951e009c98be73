"""A registry version created by the evaluate stage carries the tags and description the report
stage's annotate would give it, so that annotate has nothing to write for it."""

from types import SimpleNamespace

import numpy as np

from driftmatrix.tracking import registry


def _matrices():
    values = np.array([[[90.0, 80.0, np.nan], [np.nan, 88.5, 70.25], [np.nan, np.nan, 91.0]],
                       [[89.0, 79.0, 75.0], [np.nan, 87.0, 71.0], [np.nan, np.nan, 90.0]]])
    return SimpleNamespace(dataset="shop", model="MLP-S", metric="Accuracy", unit="%", slices=["2001", "2002", "2003"],
                           seeds=[0, 1], seed_values=values, higher_is_better=True,
                           extra={"unit_keys": [["a0", "b0", "c0"], ["a1", "b1", "c1"]]})


def _record(m, s, i):
    row = m.seed_values[s, i]
    return {"dataset": m.dataset, "model": m.model, "seed": m.seeds[s], "cutoff_index": i, "cutoff": m.slices[i],
            "slices": m.slices, "metric": "accuracy", "metric_name": m.metric, "unit": m.unit,
            "higher_is_better": True, "values": [None if np.isnan(v) else float(v) for v in row],
            "n_eval": [10, 10, 10], "run_id": "r", "unit_key": m.extra["unit_keys"][s][i]}


def test_a_new_version_gets_what_annotate_would_write():
    m = _matrices()
    for s in range(2):
        for i in range(3):
            key = m.extra["unit_keys"][s][i]
            version = SimpleNamespace(tags={"cutoff": m.slices[i], "seed": str(m.seeds[s]), "unit_key": key})
            want = registry.version_tags(m, version, 140.0)
            tags, text = registry.new_version(_record(m, s, i), 140)
            assert tags == want and want["in_distribution"] == registry._fmt(m.seed_values[s, i, i])
            assert text == registry.version_description(m, want, key)
    tags, text = registry.new_version(_record(m, 0, 0), None)
    assert tags["future_mean"] == "80" and tags["decay"] == "10" and "train_rows" not in tags
    assert "no later period yet" in registry.new_version(_record(m, 0, 2), 5)[1]
