"""Text-path benchmark: encoder throughput, cache size, time-to-matrix on the offline text default.

    python bench/text.py [--preset presets/text-reviews.yaml] [--models FFN-S TX-S] [--docs 512]

Everything runs in a temporary folder with a temporary MLflow store (never the repo's):

- ``encoder``: MiniLM-L6 (bundled weights) documents/s on this machine's device, at two lengths;
- ``cache``: bytes on disk per 1,000 documents of the built cache (token states fp16 + masks +
  pooled), and the same formula for 768-d RoBERTa states at the paper's lengths;
- ``matrix``: time-to-matrix per model on the preset (generate, ingest, slice, embed are shared
  and timed once; then train + evaluate every cutoff and seed, then the matrix).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def bench_encoder(texts: list[str], lengths=(64, 128)) -> dict:
    from driftmatrix.features import encoders
    from driftmatrix.features.cache import EmbedConfig, _encode_text_shard

    enc, load_s = timed(encoders.load, "MiniLM-L6")
    out = {"device": str(enc.device), "load_s": round(load_s, 2)}
    for length in lengths:
        _, secs = timed(_encode_text_shard, enc, texts, EmbedConfig(max_length=length), True)
        out[f"docs_per_s@{length}"] = round(len(texts) / secs, 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default=str(REPO / "presets" / "text-reviews.yaml"))
    ap.add_argument("--models", nargs="+", default=["FFN-S", "TX-S"])
    ap.add_argument("--docs", type=int, default=512, help="documents for the throughput figure")
    args = ap.parse_args()

    from driftmatrix.stages import evaluate as evaluation
    from driftmatrix.stages import matrices
    from driftmatrix.data import slicing
    from driftmatrix.stages import slice as slice_stage
    from driftmatrix.stages import train as train_stage
    from driftmatrix.config import parse_params
    from driftmatrix.data import synthetic_text
    from driftmatrix.stages import ingest

    from driftmatrix.stages import embed as embed_stage
    report: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        raw = yaml.safe_load(Path(args.preset).read_text())
        raw["dataset"]["path"] = str(tmp / "raw")
        raw["tracking"] = {**raw["tracking"], "uri": f"sqlite:///{tmp / 'mlflow.db'}",
                           "artifact_root": str(tmp / "mlruns"), "log_models": False}
        raw["embed"] = {**raw.get("embed", {}), "progress": False}
        os.environ["MLFLOW_TRACKING_URI"] = raw["tracking"]["uri"]
        params = parse_params(raw)
        params = replace(params, models={m: params.models.get(m, {}) for m in args.models})
        out = tmp / "out"
        shared = {}
        _, shared["generate_s"] = timed(synthetic_text.WRITERS[params.dataset.source], params.synthetic,
                                        params.dataset.path)
        _, shared["ingest_s"] = timed(ingest.run, params, out / "ingested")
        manifest, shared["slice_s"] = timed(slice_stage.run, params, out / "ingested", out / "slices")
        made, shared["embed_s"] = timed(embed_stage.run, params, out / "slices", out / "features")
        n_docs = sum(s["n"] for s in manifest["slices"])
        shared.update(documents=n_docs, slices=len(manifest["slices"]))
        report["shared"] = {k: round(v, 2) if isinstance(v, float) else v for k, v in shared.items()}

        cache_dir = Path(made[0]["path"])
        per_k = folder_bytes(cache_dir) / n_docs * 1000
        dim, length = made[0]["dim"], made[0]["max_len"]
        report["cache"] = {"encoder": made[0]["encoder"], "dim": dim, "max_len": length,
                           "MB_per_1000_docs": round(per_k / 1e6, 2),
                           "RoBERTa_768d_len128_MB_per_1000": round(1000 * (128 * 768 * 2 + 128 + 768 * 4) / 1e6, 1),
                           "RoBERTa_768d_len256_MB_per_1000": round(1000 * (256 * 768 * 2 + 256 + 768 * 4) / 1e6, 1)}

        report["matrix"] = {}
        for model in args.models:
            _, train_s = timed(train_stage.run, params, model, out / "slices", out / "ckpt", features_dir=out / "features")
            _, eval_s = timed(evaluation.run, params, model, out / "slices", out / "ckpt", out / "scores",
                              features_dir=out / "features")
            single = replace(params, models={model: {}})
            cohort, matrix_s = timed(matrices.run, single, out / "scores", out / model / "matrices")
            doc = json.loads((out / model / "matrices" / f"{model}.json").read_text())
            s = cohort.summaries[model]
            report["matrix"][model] = {"train_s": round(train_s, 1), "evaluate_s": round(eval_s, 1),
                                       "matrix_s": round(matrix_s, 1),
                                       "time_to_matrix_s": round(train_s + eval_s + matrix_s, 1),
                                       "units": len(doc["slices"]) * len(params.train.seeds),
                                       "in_distribution": round(s.in_distribution, 3),
                                       "future": round(s.future, 3), "decay": round(s.decay, 3)}

        rows = slicing.load_slices(out / "slices")[0]
        report["encoder"] = bench_encoder(rows["text"].head(args.docs).tolist())
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
