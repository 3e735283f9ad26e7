"""Issue 14: a cached compiled kernel is loaded only if it is the library that was built, and a build's
cache key covers every source it reads (the cell's file and common.h). Issue 38 (H1): nothing is built
in or loaded from a directory others can write to, the bytes loaded are the bytes checked, and the
cache is pruned."""

import os
import shutil
import subprocess
import sys
import textwrap
import time
import warnings

import pytest
import torch

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
    with pytest.raises(kernels.KernelCacheError, match="not private"):
        kernels._build("srnn")
    os.chmod(cache, 0o700)


# ---- H1: a cache others can write to, a library swapped between check and load -------------------------
needs_cc = pytest.mark.skipif(shutil.which("gcc") is None and shutil.which("cc") is None, reason="no C compiler")


def _shared_object(tmp_path, name, body):
    """A tiny shared library built from C ``body`` (no torch: quick to build)."""
    source = tmp_path / f"{name}.c"
    source.write_text(body)
    target = tmp_path / f"{name}.so"
    compiler = shutil.which("gcc") or shutil.which("cc")
    subprocess.run([compiler, "-shared", "-fPIC", str(source), "-o", str(target)], check=True)
    return target


@pytest.fixture
def attack(tmp_path, monkeypatch):
    """A harmless build, a hostile library whose constructor creates ``marker``, a loader slowed down
    as on a loaded machine, and a second process that puts the hostile library in place of every
    other ``.so`` it finds in the cache. Yields ``(cache, marker, start_attacker)``."""
    marker = tmp_path / "hostile-code-ran"
    benign = _shared_object(tmp_path, "benign", "int ltdrnn_test_benign(void) { return 1; }\n")
    hostile = _shared_object(
        tmp_path,
        "hostile",
        textwrap.dedent(f"""
            #include <fcntl.h>
            #include <unistd.h>
            __attribute__((constructor)) static void run(void) {{ close(creat("{marker}", 0644)); }}
        """),
    )
    monkeypatch.delenv("LTDRNN_NO_KERNELS", raising=False)
    monkeypatch.setenv("LTDRNN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(kernels, "_TORCH_OPS", {})
    monkeypatch.setattr(kernels, "_toolchain", lambda: ("cc", [], []))
    monkeypatch.setattr(kernels, "_compile", lambda *args: shutil.copy(benign, args[-1]))
    real_load = torch.ops.load_library
    monkeypatch.setattr(torch.ops, "load_library", lambda path: (time.sleep(1.0), real_load(path)))
    cache = tmp_path / "cache" / "kernels"
    cache.mkdir(parents=True)
    attacker = []

    def start_attacker():
        script = textwrap.dedent(f"""
            import os, pathlib, shutil, time
            hostile = pathlib.Path({str(hostile)!r}).read_bytes()
            end = time.time() + 20
            while time.time() < end:
                for path in pathlib.Path({str(cache)!r}).rglob("*.so"):
                    try:
                        if path.read_bytes() != hostile:
                            shutil.copy({str(hostile)!r}, str(path) + ".x")
                            os.replace(str(path) + ".x", path)
                    except OSError:
                        pass
                time.sleep(0.001)
        """)
        attacker.append(subprocess.Popen([sys.executable, "-c", script]))

    yield cache, marker, start_attacker
    for process in attacker:
        process.kill()
        process.wait()


@needs_cc
def test_a_cache_others_can_write_to_is_refused_while_a_second_process_swaps_libraries(attack):
    cache, marker, start_attacker = attack
    os.chmod(cache, 0o777)
    start_attacker()
    with pytest.warns(RuntimeWarning, match=r"kernel cache .* is not private .*mode 777.*LTDRNN_CACHE"):
        assert not kernels.load_torch_ops("srnn")
    assert not marker.exists()
    assert list(cache.iterdir()) == []  # nothing was built there


@needs_cc
def test_the_library_loaded_is_the_one_checked_even_if_its_path_is_swapped_before_loading(attack):
    """The swap a private cache rules out for other users, done here by the same user: the loader
    still gets the bytes whose hash was checked (it loads the open file, not the path)."""
    cache, marker, start_attacker = attack
    start_attacker()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = kernels.load_torch_ops("srnn")
    assert not marker.exists()
    # loaded the bytes that were checked (also when swapped after they were opened), or, swapped before they
    # were opened, refused them
    assert loaded or "content does not match the hash in its name" in str(caught[-1].message)


@pytest.mark.parametrize("mode, refused", [(0o777, True), (0o1777, False), (0o755, False)])
def test_the_directories_above_the_cache_must_not_be_open_to_others(tmp_path, monkeypatch, mode, refused):
    above = tmp_path / "shared"
    (above / "ltdrnn" / "kernels").mkdir(parents=True, mode=0o700)
    os.chmod(above, mode)
    monkeypatch.setattr(kernels, "kernel_cache_dir", lambda: above / "ltdrnn" / "kernels")
    monkeypatch.setattr(kernels, "_toolchain", lambda: ("cc", [], []))
    monkeypatch.setattr(kernels, "_compile", lambda *args: args[-1].write_bytes(b"x"))
    if refused:
        with pytest.raises(kernels.KernelCacheError, match=f"the directory above it, {above}, .*mode 777"):
            kernels._build("srnn")
    else:
        assert kernels._build("srnn").read_bytes() == b"x"


def test_a_build_prunes_rejected_stale_and_abandoned_files(cache, monkeypatch):
    monkeypatch.setattr(kernels, "_compile", lambda *args: args[-1].write_bytes(b"new"))
    cache.mkdir(parents=True, mode=0o700)
    old = time.time() - kernels.STALE_AFTER_S - 3600

    def library(name, content, age=None, mode=0o644):
        path = cache / name
        path.write_bytes(content)
        os.chmod(path, mode)
        if age is not None:
            os.utime(path, (age, age))
        return path

    good = kernels._digest(library("probe.so", b"old"))
    (cache / "probe.so").unlink()
    rejected = library(f"srnn-0000000000000000-{'f' * 16}.so", b"old")  # content does not match its name
    writable = library(f"mist-1111111111111111-{good}.so", b"old", mode=0o666)
    stale = library(f"srnn-2222222222222222-{good}.so", b"old", age=old)
    in_use = library(f"tarnn-3333333333333333-{good}.so", b"old")  # another torch may use it
    abandoned, running = cache / "build-abandoned", cache / "build-running"
    abandoned.mkdir(), running.mkdir()
    os.utime(abandoned, (old, old))
    built = kernels._build("srnn")
    assert built.read_bytes() == b"new"
    assert sorted(p.name for p in cache.iterdir()) == sorted([built.name, in_use.name, running.name])
    assert not any(p.exists() for p in (rejected, writable, stale, abandoned))
