"""Issue 14: a cached compiled kernel is loaded only if it is the library that was built, and a build's
cache key covers every source it reads (the cell's file and common.h)."""

import os
import shutil

import pytest

from ltdrnn import kernels


@pytest.fixture
def cache(tmp_path, monkeypatch):
    if shutil.which("g++") is None and shutil.which("c++") is None:
        pytest.skip("no C++ compiler on this machine")
    monkeypatch.delenv("LTDRNN_NO_KERNELS", raising=False)
    monkeypatch.setenv("LTDRNN_CACHE", str(tmp_path))
    return tmp_path / "kernels"


@pytest.mark.slow  # two builds of a C++ file against torch's headers
def test_a_tampered_cached_library_is_rebuilt_not_loaded(cache):
    built = kernels._build("srnn")
    assert built.parent == cache and built.name.startswith("srnn-") and kernels._is_intact(built)
    assert kernels._build("srnn") == built  # an intact library is reused
    original = built.read_bytes()
    built.write_bytes(original[:-64])  # truncated (a full disk) or replaced
    assert not kernels._is_intact(built)
    rebuilt = kernels._build("srnn")
    assert rebuilt.read_bytes() != original[:-64] and kernels._is_intact(rebuilt)
    _check_only_the_user_could_have_written_it(rebuilt, cache)


def test_an_edit_of_the_common_header_is_a_new_build(cache, monkeypatch):
    """The cache key covers common.h: a library built with the old header is not reused."""
    compiled = []

    def fake_compile(compiler, compile_flags, link_flags, source, target):
        compiled.append((source.parent / kernels.COMMON_HEADER).read_bytes())
        target.write_bytes(compiled[-1])

    monkeypatch.setattr(kernels, "_compile", fake_compile)
    real_sources = kernels._sources
    builds = []
    for header in (b"// one", b"// two", b"// one"):
        monkeypatch.setattr(kernels, "_sources", lambda cell, h=header: {**real_sources(cell), "common.h": h})
        builds.append(kernels._build("srnn"))
    assert compiled == [b"// one", b"// two"]  # the third build is the first one, from the cache
    assert builds[0] != builds[1] and builds[2] == builds[0]


def _check_only_the_user_could_have_written_it(built, cache):
    os.chmod(built, 0o777)
    assert not kernels._is_intact(built)
    os.chmod(built, 0o755)
    assert kernels._is_intact(built)
    os.chmod(cache, 0o777)
    assert not kernels._is_intact(built)
