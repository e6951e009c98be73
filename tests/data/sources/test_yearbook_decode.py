"""Yearbook decoding: OpenCV INTER_AREA resize, parallel decode order, member size caps."""

import io
import tarfile
import zipfile

import numpy as np
import pytest
from PIL import Image

from driftmatrix.data.sources.yearbook import area_resize, read_yearbook


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


def test_area_resize_by_hand():
    img = np.array([[0, 30, 60], [90, 120, 150], [180, 210, 240]], dtype=np.uint8)[..., None].repeat(3, 2)
    out = area_resize(img, 2)
    # output pixel (0, 0) covers input rows/cols [0, 1.5): weights 1, 0.5 per axis (area 2.25)
    expect00 = (0 * 1 + 30 * 0.5 + 90 * 0.5 + 120 * 0.25) / 2.25
    expect11 = (120 * 0.25 + 150 * 0.5 + 210 * 0.5 + 240 * 1) / 2.25
    assert out.shape == (2, 2, 3) and out.dtype == np.uint8
    assert out[0, 0, 0] == round(expect00) and out[1, 1, 2] == round(expect11)
    block = np.arange(64, dtype=np.uint8).reshape(8, 8)[..., None].repeat(3, 2)
    means = block[..., 0].reshape(4, 2, 4, 2).mean((1, 3))  # x.5 everywhere: OpenCV rounds half up
    assert np.array_equal(area_resize(block, 4)[..., 0], np.floor(means + 0.5))


@pytest.mark.parametrize("shape, exact", [((186, 171, 3), True), ((64, 64, 3), True), ((96, 64, 3), True),
                                          ((33, 70, 3), False), ((500, 401, 3), False)])
def test_area_resize_matches_opencv_inter_area(shape, exact):
    """Byte-identical on the portraits' shape and whole-number factors; elsewhere OpenCV's float32
    sums can flip a value within 1e-4 of x.5 (e.g. 159.49999 -> 160), so at most 1 off, rarely."""
    cv2 = pytest.importorskip("cv2")
    off = 0
    for k, img in enumerate(_portraits(4, seed=2, shape=shape)):
        if k % 2:
            img = np.random.default_rng(k).integers(0, 256, shape, dtype=np.uint8)
        diff = np.abs(area_resize(img, 32).astype(int) - cv2.resize(img, (32, 32), interpolation=cv2.INTER_AREA))
        assert diff.max() <= (0 if exact else 1), (shape, k)
        off += int((diff > 0).sum())
    assert off <= 4 * 32 * 32 * 3 // 1000  # under 0.1% of the values


def test_reader_resize_matches_opencv_inter_area(tmp_path):
    cv2 = pytest.importorskip("cv2")
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
