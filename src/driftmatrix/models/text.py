"""The twelve text bodies trained over cached, frozen encoder token states (protocol section 6).

Every model takes ``(states, mask)``; padded positions never influence the output (masked pooling
and attention, convolution windows that start on a real token, packed recurrent sequences). Shapes
reproduce the authors' roster (FFN-S 99k ... BiLSTM-Attn-L 2.2M on 768-d states)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from driftmatrix.features.pooling import masked_mean



def _mlp_head(in_features: int, hidden: int, num_outputs: int, dropout: float) -> nn.Sequential:
    return nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(), nn.Dropout(dropout),
                         nn.Linear(hidden, num_outputs))


class FFN(nn.Module):
    """Masked mean of the token states, then a one-hidden-layer MLP (order-free baseline)."""

    def __init__(self, dim: int, hidden: int, num_outputs: int, dropout: float = 0.1):
        super().__init__()
        self.head = _mlp_head(dim, hidden, num_outputs, dropout)

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.head(masked_mean(states, mask))


class TextCNN(nn.Module):
    """1-d convolutions of several widths, masked max over time, projection, output layer."""

    def __init__(self, dim: int, filters: int, widths: Sequence[int], proj: int, num_outputs: int,
                 dropout: float = 0.1):
        super().__init__()
        self.widths = tuple(widths)
        self.convs = nn.ModuleList(nn.Conv1d(dim, filters, k) for k in self.widths)
        self.head = _mlp_head(filters * len(self.widths), proj, num_outputs, dropout)

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = torch.where(mask.unsqueeze(-1), states, torch.zeros((), dtype=states.dtype, device=states.device))
        x = x.transpose(1, 2)  # (B, D, L)
        starts_on_token = mask.unsqueeze(1)  # window t covers tokens t..t+k-1
        pooled = []
        for k, conv in zip(self.widths, self.convs):
            out = torch.relu(conv(nn.functional.pad(x, (0, k - 1))))  # (B, F, L)
            pooled.append(out.masked_fill(~starts_on_token, float("-inf")).amax(dim=2))
        return self.head(torch.cat(pooled, dim=1))


class BiRNN(nn.Module):
    """Linear projection to the hidden size, packed bidirectional GRU/LSTM, then either the final
    states of both directions or (``attention``) a masked attention-weighted sum of the outputs."""

    def __init__(self, dim: int, hidden: int, layers: int, cell: str, num_outputs: int,
                 attention: bool = False, dropout: float = 0.1):
        super().__init__()
        rnn_cls = {"gru": nn.GRU, "lstm": nn.LSTM}[cell]
        self.proj = nn.Linear(dim, hidden)
        self.rnn = rnn_cls(hidden, hidden, num_layers=layers, batch_first=True, bidirectional=True,
                           dropout=dropout if layers > 1 else 0.0)
        self.attn = nn.Linear(2 * hidden, 1) if attention else None
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(2 * hidden, num_outputs)

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        lengths = mask.sum(dim=1).clamp_min(1)
        packed = pack_padded_sequence(self.proj(states), lengths.cpu(), batch_first=True, enforce_sorted=False)
        outputs, final = self.rnn(packed)
        if self.attn is None:
            h = final[0] if isinstance(final, tuple) else final  # (layers * 2, B, H)
            pooled = torch.cat([h[-2], h[-1]], dim=1)
        else:
            seq, _ = pad_packed_sequence(outputs, batch_first=True, total_length=states.shape[1])
            scores = self.attn(seq).squeeze(-1).masked_fill(~mask, float("-inf"))
            pooled = (torch.softmax(scores, dim=1).unsqueeze(-1) * seq).sum(dim=1)
        return self.out(self.dropout(pooled))


class TextTransformer(nn.Module):
    """Projection, learnable positions, Transformer encoder with a key padding mask, masked mean."""

    def __init__(self, dim: int, width: int, heads: int, layers: int, ff: int, max_len: int,
                 num_outputs: int, dropout: float = 0.1):
        super().__init__()
        self.proj = nn.Linear(dim, width)
        self.pos = nn.Parameter(torch.zeros(1, max_len, width))
        nn.init.trunc_normal_(self.pos, std=0.02)
        self.dropout = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(width, heads, ff, dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.out = nn.Linear(width, num_outputs)

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        length = states.shape[1]
        if length > self.pos.shape[1]:
            raise ValueError(f"sequence of {length} tokens exceeds the {self.pos.shape[1]} learned positions")
        x = self.dropout(self.proj(states) + self.pos[:, :length])
        x = self.encoder(x, src_key_padding_mask=~mask)
        return self.out(masked_mean(x, mask))


CLASSES = {"FFN": FFN, "TextCNN": TextCNN, "BiRNN": BiRNN, "TextTransformer": TextTransformer}


def build(cls: str, shape: Mapping[str, Any], num_outputs: int, info: Mapping[str, Any],
          dropout: float | None = None) -> nn.Module:
    """The network of a catalogue entry (``models.catalog.TEXT_SHAPES``) over ``info["dim"]``-d states."""
    extra: dict[str, Any] = {"dim": int(info["dim"])}
    if cls == "TextTransformer":
        extra["max_len"] = int(info["max_len"])
    if dropout is not None:
        extra["dropout"] = dropout
    return CLASSES[cls](num_outputs=num_outputs, **shape, **extra)
