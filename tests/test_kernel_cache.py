"""Issue 14: a cached compiled kernel is loaded only if it is the library that was built."""

import os
import shutil

import pytest

from ltdrnn import kernels


@pytest.fixture
def cache(tmp_path, monkeypatch):
    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.skip("no C compiler on this machine")
    monkeypatch.delenv("LTDRNN_NO_KERNELS", raising=False)
    monkeypatch.setenv("LTDRNN_CACHE", str(tmp_path))
    monkeypatch.setattr(kernels, "_LOADED", {})
    return tmp_path / "kernels"


def test_a_tampered_cached_library_is_rebuilt_not_loaded(cache):
    built = kernels._build("srnn_scan")
    assert built.parent == cache and kernels._is_intact(built)
    assert kernels._build("srnn_scan") == built  # an intact library is reused
    original = built.read_bytes()
    built.write_bytes(original[:-64])  # truncated (a full disk) or replaced
    assert not kernels._is_intact(built)
    rebuilt = kernels._build("srnn_scan")
    assert rebuilt.read_bytes() != original[:-64] and kernels._is_intact(rebuilt)
    assert kernels.load_kernel("srnn_scan") is not None
    _check_only_the_user_could_have_written_it(rebuilt, cache)


def _check_only_the_user_could_have_written_it(built, cache):
    os.chmod(built, 0o777)
    assert not kernels._is_intact(built)
    os.chmod(built, 0o755)
    assert kernels._is_intact(built)
    os.chmod(cache, 0o777)
    assert not kernels._is_intact(built)
