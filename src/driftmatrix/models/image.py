"""The twelve image models trained from raw 32x32x3 pixels (protocol section 6).

Inputs arrive as float tensors already normalised to [-1, 1] (see ``features.pixels``); shapes
and parameter counts match the authors' roster (MLP-S 98k ... ViT-L 2.2M with 2 outputs).
"""

from __future__ import annotations

import copy
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from driftmatrix.models.dropout import MaskDropout


class MLP(nn.Module):
    def __init__(self, hidden: Sequence[int], num_outputs: int, in_features: int = 3 * 32 * 32):
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, num_outputs))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class CNN(nn.Module):
    """Blocks of 3x3 conv + BatchNorm + ReLU + 2x2 max-pool, then global average pool. The ReLU runs
    after the pool: the same outputs and gradients bit for bit on a quarter of the elements."""

    def __init__(self, channels: Sequence[int], num_outputs: int, in_channels: int = 3):
        super().__init__()
        blocks: list[nn.Module] = []
        c = in_channels
        for out in channels:
            blocks += [nn.Conv2d(c, out, 3, padding=1), nn.BatchNorm2d(out), nn.MaxPool2d(2),
                       nn.ReLU(inplace=True)]
            c = out
        self.features = nn.Sequential(*blocks)
        self.head = nn.Linear(c, num_outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    """3x3 stem, stages of basic blocks (stride 2 from the second stage), global average pool."""

    def __init__(self, widths: Sequence[int], blocks: Sequence[int], num_outputs: int, in_channels: int = 3):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, widths[0], 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(widths[0]), nn.ReLU(inplace=True))
        layers: list[nn.Module] = []
        c = widths[0]
        for s, (w, n) in enumerate(zip(widths, blocks)):
            for b in range(n):
                layers.append(BasicBlock(c, w, 2 if (s > 0 and b == 0) else 1))
                c = w
        self.stages = nn.Sequential(*layers)
        self.head = nn.Linear(c, num_outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stages(self.stem(x)).mean(dim=(2, 3)))


def uninitialised_linear(n_in: int, n_out: int) -> nn.Linear:
    """``nn.utils.skip_init(nn.Linear, n_in, n_out)``: built on the meta device, so its initialisation
    draws nothing from the RNG, then given empty CPU tensors. ``skip_init``'s ``to_empty`` does the
    same through ``torch._refs``, whose first use imports sympy (0.4-2.5 s a process)."""
    linear = nn.Linear(n_in, n_out, device="meta")
    linear.weight = nn.Parameter(torch.empty(n_out, n_in))
    linear.bias = nn.Parameter(torch.empty(n_out))
    return linear


class EncoderBlock(nn.Module):
    """Pre-norm Transformer encoder layer: the arithmetic and initialisation order of
    ``nn.TransformerEncoderLayer(norm_first=True, activation="gelu")``, written out so its four
    dropouts are :class:`MaskDropout` (``nn.MultiheadAttention`` draws its own internally)."""

    def __init__(self, dim: int, heads: int, hidden: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.proj = nn.Linear(dim, dim)  # MultiheadAttention: out_proj first, then in_proj (xavier)
        self.qkv = uninitialised_linear(dim, 3 * dim)
        nn.init.xavier_uniform_(self.qkv.weight)
        nn.init.zeros_(self.qkv.bias)
        nn.init.zeros_(self.proj.bias)
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.drop = MaskDropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        weights = self.drop(((q * (q.shape[-1] ** -0.5)) @ k.transpose(-2, -1)).softmax(dim=-1))
        x = x + self.drop(self.proj((weights @ v).transpose(1, 2).reshape(b, n, d)))
        return x + self.drop(self.fc2(self.drop(nn.functional.gelu(self.fc1(self.norm2(x))))))


class ViT(nn.Module):
    """Patch embedding, class token, learnable positions, pre-norm Transformer encoder."""

    def __init__(self, dim: int, depth: int, heads: int, mlp_ratio: float, num_outputs: int,
                 patch: int = 4, image_size: int = 32, in_channels: int = 3, dropout: float = 0.1):
        super().__init__()
        n_patches = (image_size // patch) ** 2
        self.patch_embed = nn.Conv2d(in_channels, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, n_patches + 1, dim))
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.dropout = MaskDropout(dropout)
        # every block starts as a copy of one, as nn.TransformerEncoder (and the authors' ViT) does
        block = EncoderBlock(dim, heads, int(dim * mlp_ratio), dropout)
        self.blocks = nn.Sequential(*(copy.deepcopy(block) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.patch_embed(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls_token.expand(len(x), -1, -1), tokens], dim=1) + self.pos_embed
        return self.head(self.norm(self.blocks(self.dropout(tokens))[:, 0]))


CLASSES = {"MLP": MLP, "CNN": CNN, "ResNet": ResNet, "ViT": ViT}


def build(cls: str, shape: Mapping[str, Any], num_outputs: int, info: Mapping[str, Any] | None = None,
          dropout: float | None = None) -> nn.Module:
    """The network of a catalogue entry (``models.catalog.IMAGE_SHAPES``)."""
    kwargs = dict(shape)
    if dropout is not None and cls == "ViT":
        kwargs["dropout"] = dropout
    return CLASSES[cls](num_outputs=num_outputs, **kwargs)
