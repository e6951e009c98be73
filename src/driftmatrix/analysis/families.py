"""Architecture families, named as in the paper's appendix sections (C.2-C.6, D.2-D.6)."""

from __future__ import annotations

_TRAINED_PREFIXES = {  # name prefix before the size suffix -> family
    "MLP": "MLP", "CNN": "CNN", "ResNet": "ResNet", "ViT": "ViT",
    "FFN": "FFN", "TextCNN": "TextCNN", "BiGRU": "Recurrent", "BiLSTM": "Recurrent",
    "BiLSTM-Attn": "Recurrent", "TX": "Transformer",
}
_SIZES = ("S", "M", "L")

PAPER_FAMILIES: dict[str, str] = {
    f"{prefix}-{size}": fam for prefix, fam in _TRAINED_PREFIXES.items() for size in _SIZES
}
PAPER_FAMILIES.update({name: "Transfer" for name in (
    "DINOv2-S", "DINOv3-S", "CLIP-B32", "SigLIP-B", "ConvNeXt-S", "ResNet50-IN",
    "ViT-S16-IN21k", "MAE-B", "EVA02-B")})
PAPER_FAMILIES.update({name: "Frozen" for name in (
    "BERT", "RoBERTa", "DeBERTa-v3", "ELECTRA", "MPNet", "ModernBERT", "DistilBERT", "MiniLM-L6")})


def family_of(model: str, declared: str | None = None) -> str | None:
    """Family of a model: declared, then the project registry, then the paper's names; else None."""
    if declared:
        return declared
    try:
        from driftmatrix.models.catalog import family_of as registry_family

        found = registry_family(model)
        if found:
            return found
    except Exception:  # registry absent or not importable (e.g. no torch): fall back
        pass
    return PAPER_FAMILIES.get(model)
