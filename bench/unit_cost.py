"""CPU training and inference samples/s of every registered model, on synthetic inputs of the real shape.

    python bench/unit_cost.py [--model NAME ...] [--seconds 1.5] [--json out.json]

The planner's CPU scale (``driftmatrix plan --scale cpu``, ``scaleplan.CPU_RATES``) uses these
figures: a unit of model m at cutoff i costs epochs x training rows / training samples/s. Inputs:
pixels 3 x 32 x 32; text bodies 128 token states of 768 (every token real: an upper bound);
linear heads on pooled features of the encoder's width (768 unless DIMS says). fp32, Adam, batch 64 for training and 256
for inference, one thread (a Ray unit with num_cpus 1 gets one). Figures are samples per CPU-second
of this process, so other load on a shared machine inflates them less than wall time would; each
runs for about ``--seconds`` of CPU after one warm-up.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from driftmatrix.models.catalog import REGISTRY

DIMS = {"MiniLM-L6": 384, "DINOv2-S": 384, "DINOv3-S": 384, "ViT-S16-IN21k": 384, "ResNet50-IN": 2048}


def inputs_for(spec, batch: int):
    if spec.inputs == "pixels":
        return (torch.randn(batch, 3, 32, 32).contiguous(memory_format=torch.channels_last),), {}
    dim = DIMS.get(spec.name, 768)
    if spec.inputs == "token_states":
        return (torch.randn(batch, 128, 768), torch.ones(batch, 128, dtype=torch.bool)), {"dim": 768, "max_len": 128}
    return (torch.randn(batch, dim),), {"dim": dim}


def rate(step, batch: int, seconds: float) -> float:
    """Samples per CPU-second of this process (not wall time: the machine is shared)."""
    step()
    n, start = 0, time.process_time()
    while n < 2 or time.process_time() - start < seconds:
        step()
        n += 1
    return n * batch / (time.process_time() - start)


def measure(name: str, seconds: float) -> tuple[float, float]:
    spec = REGISTRY[name]
    x, info = inputs_for(spec, 64)
    torch.manual_seed(0)
    model = spec.build(2, info)
    if spec.inputs == "pixels":
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    y = torch.randint(0, 2, (64,))

    def train_step():
        loss = torch.nn.functional.cross_entropy(model(*x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    model.train()
    train = rate(train_step, 64, seconds)
    xi, _ = inputs_for(spec, 256)
    model.eval()

    def infer_step():
        with torch.inference_mode():
            model(*xi)

    return train, rate(infer_step, 256, seconds)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", nargs="*", default=None)
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = {}
    for name in args.model or list(REGISTRY):
        train, infer = measure(name, args.seconds)
        out[name] = [round(train), round(infer)]
        print(f"{name:<16} train {train:>10,.0f} samples/CPU-s   inference {infer:>10,.0f} samples/CPU-s", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
