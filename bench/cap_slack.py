"""Choose the class-balance cap's slack (estimate.cap_slack) on a backtest it is not measured on.

Backtests every model of a finished run once per slack in a grid and prints, per slack and model,
the best capped method, its MAE and the share of carry-forward's excess over the noise floor it
closes. The chosen slack is the one with the largest mean share over the models. Run it on the
validation draw of the built-in data, not on the default whose backtest reports the result:

    make repro PARAMS=presets/estimate-seed1.yaml
    python bench/cap_slack.py [-p params.yaml] [--out outputs/estimates/cap_slack.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

GRID = (0.0, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0)


def best_capped(summary: dict) -> tuple[str, float, float]:
    """(method, MAE, share of carry-forward's excess over the floor closed) of the best capped method."""
    capped = {m: r["mae"] for m, r in summary.items() if m.endswith("+cap") and isinstance(r, dict)}
    method = min(capped, key=capped.get)
    floor, cf = summary["noise_floor"], summary["carry-forward"]["mae"]
    return method, capped[method], (cf - capped[method]) / (cf - floor)


def main() -> None:
    from driftmatrix.config import estimate_config, load_params
    from driftmatrix.estimate import backtest
    from driftmatrix.data.table import read_manifest
    from driftmatrix.stages.estimates import load_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-p", "--params", default="params.yaml")
    ap.add_argument("--out", default="outputs/estimates/cap_slack.json")
    a = ap.parse_args()
    params = load_params(a.params)
    cfg = estimate_config(params)
    manifest = read_manifest("outputs/slices")
    scores = {m: load_model(params, m, manifest, "outputs/scores") for m in params.models}
    table = {}
    for slack in GRID:
        row = {}
        for model, ms in scores.items():
            if ms is None:
                continue
            s = backtest.run(ms, cfg.min_ess, cfg.label_shift, cap_slack=slack).summary
            method, mae, closed = best_capped(s)
            row[model] = {"method": method, "mae": round(mae, 3), "closed": round(closed, 3),
                          "noise_floor": s["noise_floor"], "carry_forward": s["carry-forward"]["mae"]}
        table[slack] = {"models": row, "mean_closed": round(float(np.mean([r["closed"] for r in row.values()])), 3)}
        print(f"slack {slack:4}: mean closed {table[slack]['mean_closed']:.0%}  "
              + "  ".join(f"{m} {r['method']} {r['mae']:.2f} ({r['closed']:.0%})" for m, r in row.items()))
    chosen = max(GRID, key=lambda k: table[k]["mean_closed"])
    print(f"chosen slack on {params.dataset.name}: {chosen}")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"dataset": params.dataset.name, "chosen": chosen,
                                       "grid": {str(k): v for k, v in table.items()}}, indent=2))


if __name__ == "__main__":
    main()
