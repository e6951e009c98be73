"""Early-cutoff CNN-S accuracy with our [-1, 1] pixel inputs against the authors' raw 0-255 floats.

    python bench/input_scale.py WORK [--model CNN-S] [--seeds 5] [--cutoffs 3]

``WORK`` holds a ``params.yaml`` and its ``outputs/slices`` (e.g. a run of bench/anchor.py kept
with ``--keep``, with the anchor params beside it). For each input scaling and each seed, trains a
fresh model on the first ``--cutoffs`` cumulative windows exactly as the train stage does, and
prints M_ii (in-distribution accuracy) mean +- std per cutoff. Protocol section 6 has us
normalise (the authors' raw inputs are a known slip); this shows what that choice does where the
two sides' matrices differ (the smallest windows).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

SCALINGS = {"ours [-1, 1]": None, "raw 0-255": lambda p: p.float(), "[0, 1]": lambda p: p.float().div_(255.0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path)
    ap.add_argument("--model", default="CNN-S")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--cutoffs", type=int, default=3)
    args = ap.parse_args()
    from dataclasses import replace

    from driftmatrix.config import load_params
    from driftmatrix.features import inputs
    from driftmatrix.learn.tasks import cell_score
    from driftmatrix.units.experiment import Experiment
    from driftmatrix.learn.fit import predict

    exp = Experiment(load_params(args.work / "params.yaml"), args.model, args.work / "outputs" / "slices")
    ours = inputs.normalise
    for name, scaling in SCALINGS.items():
        inputs.normalise = scaling or ours
        ids = np.zeros((args.seeds, args.cutoffs))
        for seed in range(args.seeds):
            for i in range(args.cutoffs):
                unit = next(u for u in exp.plan.units if u.seed == exp.plan.units[0].seed and u.cutoff_index == i)
                model, _, _ = exp.train_unit(replace(unit, seed=seed))
                test = np.flatnonzero((exp.slice_ids == i) & (exp.split == "test"))
                out = predict(model, exp.inputs, exp.cfg.eval_batch_size, exp.cfg.precision, test)
                ids[seed, i] = cell_score(exp.meta.task, out, exp.targets_np[test])[0]
        print(f"{name:<13} " + "  ".join(f"M{i}{i} {ids[:, i].mean():.1f} +- {ids[:, i].std(ddof=1):.1f}"
                                          for i in range(args.cutoffs)), flush=True)
    inputs.normalise = ours


if __name__ == "__main__":
    main()
