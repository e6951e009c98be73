"""resolve_precision: auto/bf16/fp32 against monkeypatched hardware capabilities."""

import logging

import pytest

from driftmatrix.learn import precision


def fake_cpuinfo(tmp_path, flags: str):
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: {flags}\n\n"
                    f"processor\t: 1\nflags\t\t: {flags}\n")
    return path


@pytest.mark.parametrize("flags, expected", [
    ("fpu sse2 avx2 avx512f avx512_bf16", "bf16"),
    ("fpu sse2 avx2 amx_bf16 amx_tile amx_int8", "bf16"),
    ("fpu sse2 avx avx2 fma", "fp32"),
    ("fpu sse2 avx2 avx512f amx_tile", "fp32"),  # AMX tiles without the bf16 unit
])
def test_auto_on_cpu_follows_cpuinfo_flags(tmp_path, monkeypatch, flags, expected):
    monkeypatch.setattr(precision, "CPUINFO", fake_cpuinfo(tmp_path, flags))
    monkeypatch.setattr(precision, "torch_cpu_bf16", lambda: pytest.fail("cpuinfo was readable"))
    assert precision.resolve_precision("auto", "cpu") == expected


def test_cpuinfo_unreadable_falls_back_to_torch_probe(tmp_path, monkeypatch):
    monkeypatch.setattr(precision, "CPUINFO", tmp_path / "missing")
    monkeypatch.setattr(precision, "torch_cpu_bf16", lambda: True)
    assert precision.resolve_precision("auto", "cpu") == "bf16"
    monkeypatch.setattr(precision, "torch_cpu_bf16", lambda: False)
    assert precision.resolve_precision("auto", "cpu") == "fp32"


def test_torch_probe_runs_on_this_machine():
    assert isinstance(precision.torch_cpu_bf16(), bool)


@pytest.mark.parametrize("supported, expected", [(True, "bf16"), (False, "fp32")])
def test_auto_on_cuda_follows_torch(monkeypatch, supported, expected):
    monkeypatch.setattr(precision, "cuda_has_bf16", lambda: supported)
    monkeypatch.setattr(precision, "cpu_has_bf16_units", lambda: pytest.fail("CPU probed for a GPU"))
    assert precision.resolve_precision("auto", "cuda:0") == expected


def test_torch_device_objects_are_accepted(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(precision, "cuda_has_bf16", lambda: True)
    assert precision.resolve_precision("auto", torch.device("cuda", 1)) == "bf16"


def test_other_devices_have_no_bf16_units():
    assert precision.resolve_precision("auto", "mps") == "fp32"


def test_fp32_passes_through_without_probing(monkeypatch):
    monkeypatch.setattr(precision, "has_bf16_units", lambda d: pytest.fail("probed for fp32"))
    assert precision.resolve_precision("fp32", "cpu") == "fp32"


def test_bf16_kept_where_supported(monkeypatch, caplog):
    monkeypatch.setattr(precision, "cpu_has_bf16_units", lambda: True)
    with caplog.at_level(logging.WARNING, logger="driftmatrix.learn.precision"):
        assert precision.resolve_precision("bf16", "cpu") == "bf16"
    assert not caplog.records


def test_bf16_without_units_falls_back_to_fp32_with_warning(monkeypatch, caplog):
    monkeypatch.setattr(precision, "cpu_has_bf16_units", lambda: False)
    with caplog.at_level(logging.WARNING, logger="driftmatrix.learn.precision"):
        assert precision.resolve_precision("bf16", "cpu") == "fp32"
    assert any("no bf16 matrix units" in r.getMessage() for r in caplog.records)


def test_auto_without_units_does_not_warn(monkeypatch, caplog):
    monkeypatch.setattr(precision, "cpu_has_bf16_units", lambda: False)
    with caplog.at_level(logging.WARNING, logger="driftmatrix.learn.precision"):
        assert precision.resolve_precision("auto", "cpu") == "fp32"
    assert not caplog.records


@pytest.mark.parametrize("bad", ["fp16", "BF16", "", "float32"])
def test_unknown_precision_is_a_named_error(bad):
    with pytest.raises(ValueError, match="train.precision"):
        precision.resolve_precision(bad, "cpu")
