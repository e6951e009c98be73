"""Yearbook decoding: OpenCV decode and INTER_AREA resize, parallel decode order, member size caps."""

import io
import tarfile
import zipfile

import cv2
import numpy as np
import pytest
from PIL import Image

from driftmatrix.data.sources.yearbook import OPENCV_PNG_MODES, decode, read_yearbook


def _png(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def _portraits(n: int, seed: int = 0, shape=(186, 171, 3)) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        smooth = np.add.outer(np.arange(shape[0]) * (k + 1), np.arange(shape[1]) * 3)[..., None] * [1, 2, 5]
        noise = rng.integers(0, 60, shape)
        out.append(((smooth + noise) % 256).astype(np.uint8))
    return out


def _folder(root, images, years=None):
    for k, arr in enumerate(images):
        cls = "FM"[k % 2]
        year = years[k] if years else 1950 + k % 7
        (root / cls).mkdir(parents=True, exist_ok=True)
        (root / cls / f"{year}_s_c_school_{k:04d}.png").write_bytes(_png(arr))
    return root


def _encoded(arr: np.ndarray, mode: str) -> bytes:
    im = Image.fromarray(arr)
    if mode == "P":
        im = im.quantize(64)
    elif mode == "I;16":
        im = Image.fromarray((arr[..., 0].astype(np.uint16) * 257))
    else:
        im = im.convert(mode)
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    assert Image.open(io.BytesIO(buf.getvalue())).mode == mode
    return buf.getvalue()


@pytest.mark.parametrize("mode", [*sorted(OPENCV_PNG_MODES), "I;16"])
@pytest.mark.parametrize("size", [32, 40])
def test_decode_gives_pillows_rgb_bytes_resized_by_opencv(mode, size):
    """Whichever decoder a PNG takes (OpenCV for 8-bit modes, Pillow for the rest), the pixels are
    Pillow's convert("RGB") and the resize OpenCV's INTER_AREA (what the authors ran)."""
    arr = _portraits(1, seed=3)[0]
    rgba = np.dstack([arr, (np.arange(171)[None, :] + np.arange(186)[:, None]).astype(np.uint8)])
    data = _encoded(rgba if mode in ("RGBA", "LA") else arr, mode)
    full = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    out = decode(data, size)
    assert out.dtype == np.uint8 and out.shape == (size, size, 3)
    assert np.array_equal(out, cv2.resize(full, (size, size), interpolation=cv2.INTER_AREA))


def test_an_image_already_at_size_is_kept_as_decoded():
    arr = _portraits(1, seed=4, shape=(32, 32, 3))[0]
    assert np.array_equal(decode(_png(arr), 32), arr)


def test_reader_resize_matches_opencv_inter_area(tmp_path):
    images = _portraits(6)
    res = read_yearbook(_folder(tmp_path / "yb", images), size=32)
    by_name = dict(zip(res.table["id"], res.images))
    for k, arr in enumerate(images):
        ref = cv2.resize(arr, (32, 32), interpolation=cv2.INTER_AREA)
        ours = by_name[f"{'FM'[k % 2]}/{1950 + k % 7}_s_c_school_{k:04d}"]
        assert np.array_equal(ours, ref), np.abs(ours.astype(int) - ref).max()


def test_parallel_decode_is_deterministic(tmp_path):
    images = _portraits(40, seed=1, shape=(40, 36, 3))
    root = _folder(tmp_path / "yb", images)
    (root / "M" / "1951_broken.png").write_bytes(b"\x89PNG\r\n\x1a\nbroken")
    one = read_yearbook(root, size=8, workers=1)
    for workers in (2, 3):
        many = read_yearbook(root, size=8, workers=workers, window=5)
        assert np.array_equal(one.images, many.images)
        assert one.table.equals(many.table) and one.report.to_dict() == many.report.to_dict()
    assert one.report.dropped == {"undecodable image": 1} and len(one.table) == 40


def test_member_size_cap_in_folder_zip_and_tar(tmp_path):
    small, big = _png(np.zeros((8, 8, 3), np.uint8)), b"\x89PNG" + bytes(5000)
    files = {"F/1950_a_1.png": small, "M/1950_b_2.png": big}
    root = tmp_path / "yb"
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    with zipfile.ZipFile(tmp_path / "yb.zip", "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for rel, data in files.items():
            zf.writestr(rel, data)
    with tarfile.open(tmp_path / "yb.tar.gz", "w:gz") as tf:
        for rel, data in files.items():
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    for path in (root, tmp_path / "yb.zip", tmp_path / "yb.tar.gz"):
        res = read_yearbook(path, size=4, max_bytes=1000)
        r = res.report
        assert list(res.table["id"]) == ["F/1950_a_1"] and r.dropped == {"oversized input": 1}, path
        assert "5004 bytes > max_bytes 1000" in r.examples["oversized input"][0]
