"""`driftmatrix estimate` on a new year of the built-in data whose labels are hidden, checked
against those labels (issues 27, 31): does it flag the cutoff models whose true drop exceeds the
noise of their held-out cell (2 binomial standard errors), and none of the Prior baseline's?

Writes year K+1 of the configured built-in dataset to a scratch folder, copies its images into
one folder with neutral names (no class folders, no year), runs the estimate command's code on it,
then scores every unit on the same images with the labels and compares. Run from a finished
`make repro` (and its estimates stage):

    python bench/estimate_new_period.py [-p params.yaml] [--out outputs/estimates/new-period]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np


def main() -> None:
    from driftmatrix.config import load_params
    from driftmatrix.data import synthetic
    from driftmatrix.stages import newperiod
    from driftmatrix.stages.estimates import load_model
    from driftmatrix.data.table import read_manifest

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-p", "--params", default="params.yaml")
    ap.add_argument("--out", default="outputs/estimates/new-period")
    a = ap.parse_args()
    params = load_params(a.params)
    manifest = read_manifest("outputs/slices")
    classes = manifest["dataset"]["class_names"]
    year = params.synthetic.first_year + params.synthetic.years
    with tempfile.TemporaryDirectory() as tmp:
        full, flat = Path(tmp) / "full", Path(tmp) / "hidden"
        synthetic.write_builtin("yearbook", replace(params.synthetic, years=params.synthetic.years + 1), full)
        files = sorted(full.rglob(f"{year}_*.png"))
        flat.mkdir()
        labels = []
        for k, f in enumerate(files):  # sorted names = the order read_images reads them in
            shutil.copy(f, flat / f"row{k:05d}.png")
            labels.append(classes.index(f.parent.name))
        labels = np.array(labels)
        records = newperiod.run(params, flat, out=a.out)
        size = int(np.load("outputs/slices/images.npy", mmap_mode="r").shape[1])
        images, _ = newperiod.read_images(flat, size)
    truth = {}
    for model in params.models:
        ms = load_model(params, model, manifest, "outputs/scores")
        outs = newperiod.unit_outputs(params, model, ms, images, "outputs/checkpoints", "outputs/slices")
        for i in range(ms.K):
            accs = [100 * float((outs[s, i].argmax(1) == labels).mean()) for s in range(len(ms.seeds)) if (s, i) in outs]
            truth[model, ms.slices[i]] = float(np.mean(accs))
    rows, per_method = [], {}
    for r in records:
        true_acc = truth[r["model"], r["cutoff"]]
        true_drop = r["in_distribution"] - true_acc
        should = true_drop > r["noise"]
        rows.append({**{k: r[k] for k in ("model", "cutoff", "in_distribution", "trusted", "drop", "retrain")},
                     "true_accuracy": round(true_acc, 3), "true_drop": round(true_drop, 3), "should_retrain": should,
                     "estimate": r["estimates"][r["trusted"]]})
        for m, v in r["estimates"].items():
            per_method.setdefault(r["model"], {}).setdefault(m, []).append(abs(v - true_acc))
    summary = {}
    for model in params.models:
        mine = [x for x in rows if x["model"] == model]
        if not mine:
            continue
        summary[model] = {
            "flagged": sum(x["retrain"] for x in mine), "should": sum(x["should_retrain"] for x in mine),
            "true_positive": sum(x["retrain"] and x["should_retrain"] for x in mine),
            "false_positive": sum(x["retrain"] and not x["should_retrain"] for x in mine),
            "false_negative": sum(x["should_retrain"] and not x["retrain"] for x in mine),
            "cutoffs": len(mine), "trusted": sorted({x["trusted"] for x in mine}),
            "mae_trusted": round(float(np.mean([abs(x["estimate"] - x["true_accuracy"]) for x in mine])), 3),
            "mae_by_method": {m: round(float(np.mean(v)), 3) for m, v in per_method[model].items()}}
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "check.json").write_text(json.dumps({"year": year, "rows": len(labels), "noise_se": newperiod.NOISE_SE,
                                                        "summary": summary, "cells": rows}, indent=2))
    print(f"year {year}, {len(labels)} images, labels hidden; a drop within {newperiod.NOISE_SE:g} SE of the held-out cell is noise")
    for model, s in summary.items():
        print(f"{model:<8} flagged {s['flagged']:>2} of {s['cutoffs']}, should {s['should']:>2}: "
              f"TP {s['true_positive']} FP {s['false_positive']} FN {s['false_negative']}; trusted {','.join(s['trusted'])} "
              f"MAE {s['mae_trusted']}; by method " + ", ".join(f"{m} {v}" for m, v in s["mae_by_method"].items()))
    for x in rows:
        if x["retrain"] != x["should_retrain"]:
            print(f"  miss: {x['model']} cutoff {x['cutoff']}: estimated drop {x['drop']:.1f} ({x['trusted']}), "
                  f"true drop {x['true_drop']:.1f}")


if __name__ == "__main__":
    main()
