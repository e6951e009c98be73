"""Yearbook reader: folder, nested folder, .zip and .tar.gz archives give the same table."""

import io
import tarfile
import zipfile

import numpy as np
import pytest
from PIL import Image

from driftmatrix.data.sources.yearbook import read_yearbook
from driftmatrix.data.table import DataError

TOP = "faces_aligned_small_mirrored_co_aligned_cropped_cleaned"


def png(value: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (value, value, value)).save(buf, format="PNG")
    return buf.getvalue()


FILES = {
    "F/1950_CA_town_school_1.png": png(10),
    "F/1951_NY_town_school_2.png": png(20),
    "M/1950_TX_town_school_3.png": png(30),
    "M/1999_TX_town_school_4.png": b"\x89PNG not really",   # undecodable image
    "M/notes.txt": b"hello",                                  # not an image file
    "F/undated_portrait.png": png(40),                        # bad timestamp
}


def write_folder(root):
    for rel, data in FILES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return root


def check(res):
    t = res.table
    assert list(t["id"]) == ["F/1950_CA_town_school_1", "F/1951_NY_town_school_2", "M/1950_TX_town_school_3"]
    assert list(t["label"]) == [0, 0, 1] and list(t["period"]) == ["1950", "1951", "1950"]
    assert res.images.shape == (3, 4, 4, 3) and res.images.dtype == np.uint8
    assert res.images[:, 0, 0, 0].tolist() == [10, 20, 30]
    r = res.report
    assert (r.read, r.kept) == (6, 3)
    assert dict(r.dropped) == {"undecodable image": 1, "not an image file": 1, "bad timestamp": 1}
    res.validate()


def test_folder_and_nested_folder(tmp_path):
    check(read_yearbook(write_folder(tmp_path / "yb"), size=4))
    check(read_yearbook(tmp_path / "yb", size=4))
    nested = write_folder(tmp_path / "outer" / TOP)
    res = read_yearbook(nested.parent, size=4)
    check(res)
    assert res.table["source"].iloc[0] == f"outer/{TOP}/F/1950_CA_town_school_1.png"


def test_zip_archive_nested_one_level(tmp_path):
    path = tmp_path / "yearbook.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for rel, data in reversed(list(FILES.items())):
            zf.writestr(f"{TOP}/{rel}", data)
        zf.writestr(f"__MACOSX/{TOP}/F/._1950_CA_town_school_1.png", b"junk")  # ignored, not counted
    res = read_yearbook(path, size=4)
    check(res)
    assert res.report.examples["undecodable image"][0].startswith(f"yearbook.zip:{TOP}/M/1999_TX")


def test_tar_gz_archive_nested_two_levels(tmp_path):
    path = tmp_path / f"{TOP}.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for rel, data in FILES.items():
            info = tarfile.TarInfo(f"download/{TOP}/{rel}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    check(read_yearbook(path, size=4))


def test_strict_and_bad_inputs(tmp_path):
    root = write_folder(tmp_path / "yb")
    with pytest.raises(DataError, match=r"yb/F/undated_portrait\.png: field 'file name'"):
        read_yearbook(root, size=4, strict=True)
    with pytest.raises(DataError, match="unknown option"):
        read_yearbook(root, colour=True)
    (tmp_path / "x.rar").write_bytes(b"")
    with pytest.raises(DataError, match="not a Yearbook folder or archive"):
        read_yearbook(tmp_path / "x.rar")


def test_folder_without_class_folders_is_named(tmp_path):
    (tmp_path / "empty" / "a" / "b" / "c" / "F").mkdir(parents=True)  # three levels down: too deep
    (tmp_path / "empty" / "a" / "b" / "c" / "F" / "1950_x.png").write_bytes(png(1))
    with pytest.raises(DataError, match="no F/ or M/ folder"):
        read_yearbook(tmp_path / "empty")
