"""A cached compiled kernel is loaded only if it is the library that was built, and a build's cache key
covers every source it reads (the cell's file and common.h). Nothing is built in, copied to or loaded
from a directory others can write to (the cache, the directory above it, ``$TMPDIR``), the bytes loaded
are the bytes checked, and the cache is pruned."""

import ctypes
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import types
import warnings
from pathlib import Path

import pytest

from ltdrnn.ops import kernels


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
    """A harmless build, a hostile library whose constructor creates ``marker``, a dynamic loader slowed
    down as on a loaded machine that records the file each load opens, and a second process that puts the
    hostile library in place of every other ``.so`` it finds in the cache. Yields a namespace of
    ``cache``, ``marker``, ``hostile`` (its path), ``loaded`` (the file each load opened, with the mode of its
    directory) and
    ``start_attacker``."""
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
    loaded = []
    real_load = ctypes.CDLL

    def slow_load(name, *args, **kwargs):  # torch.ops.load_library and kernels load through ctypes.CDLL
        path = Path(os.path.realpath(name))
        loaded.append((path, stat.S_IMODE(path.parent.stat().st_mode)))
        time.sleep(1.0)
        return real_load(name, *args, **kwargs)

    monkeypatch.setattr(ctypes, "CDLL", slow_load)
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

    yield types.SimpleNamespace(
        cache=cache, marker=marker, hostile=hostile, loaded=loaded, start_attacker=start_attacker
    )
    for process in attacker:
        process.kill()
        process.wait()


@needs_cc
def test_a_cache_others_can_write_to_is_refused_while_a_second_process_swaps_libraries(attack):
    cache, marker = attack.cache, attack.marker
    os.chmod(cache, 0o777)
    attack.start_attacker()
    with pytest.warns(RuntimeWarning, match=r"kernel cache .* is not private .*mode 777.*LTDRNN_CACHE"):
        assert not kernels.load_torch_ops("srnn")
    assert not marker.exists()
    assert list(cache.iterdir()) == []  # nothing was built there


@needs_cc
def test_the_library_loaded_is_the_one_checked_even_if_its_path_is_swapped_before_loading(attack):
    """The swap a private cache rules out for other users, done here by the same user, also to the copy
    that is loaded: the loader still gets the bytes whose hash was checked (it opens the descriptor that
    was hashed, not a path)."""
    marker = attack.marker
    attack.start_attacker()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = kernels.load_torch_ops("srnn")
    assert not marker.exists()
    # loaded the bytes that were checked (also when swapped after they were opened), or, swapped before they
    # were opened, refused them
    assert loaded or "content does not match the hash in its name" in str(caught[-1].message)


#: Another user's process, given a directory, the file name of a cached library and (on stdin) a hostile
#: library: it renames every directory it did not make there, makes its own under that name, and keeps
#: the hostile library at the file name in each directory of its own.
TMPDIR_ATTACKER = textwrap.dedent("""
    import os, sys, time
    shared, name = sys.argv[1], sys.argv[2]
    hostile = sys.stdin.buffer.read()
    own = set()
    end = time.time() + 30
    while time.time() < end:
        for entry in os.listdir(shared):
            path = os.path.join(shared, entry)
            try:
                if entry not in own and not entry.endswith(".moved") and os.path.isdir(path):
                    os.rename(path, path + ".moved")  # allowed: the directory above is not sticky
                    os.mkdir(path)
                    os.chmod(path, 0o777)
                    own.add(entry)
                if entry in own:
                    target = os.path.join(path, name)
                    try:
                        with open(target, "rb") as current:
                            if current.read() == hostile:
                                continue
                    except OSError:  # not there yet, or not readable: replace it all the same
                        pass
                    with open(target + ".x", "wb") as out:
                        out.write(hostile)
                    os.replace(target + ".x", target)
            except OSError:
                pass
        time.sleep(0.001)
""")


def _another_user():
    """``(uid, gid, python)`` of ``nobody`` and an interpreter it can run, where this test runs as root;
    else None (the attacker then runs as this user, and still attacks only the shared directory)."""
    if os.geteuid() != 0:
        return None
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        return None
    user = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
    for python in filter(None, dict.fromkeys((sys.executable, shutil.which("python3"), "/usr/bin/python3"))):
        try:
            if subprocess.run([python, "-c", ""], capture_output=True, **user).returncode == 0:
                return nobody.pw_uid, nobody.pw_gid, python
        except OSError:  # this user may not reach it (a home directory of mode 0700)
            continue
    return None


@pytest.fixture
def open_tmpdir(monkeypatch):
    """``$TMPDIR`` set to a fresh directory every user may write to, without the sticky bit (anyone may
    rename anyone's entries there)."""
    shared = Path(tempfile.mkdtemp(prefix="ltdrnn-open-tmpdir-"))
    os.chmod(shared, 0o777)
    monkeypatch.setenv("TMPDIR", str(shared))
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    yield shared
    shutil.rmtree(shared, ignore_errors=True)


@needs_cc
def test_nothing_is_copied_to_or_loaded_from_a_tmpdir_others_can_rename_in(attack, open_tmpdir):
    """Another user (nobody, where the test runs as root) replaces every directory made in an open
    ``$TMPDIR`` with one of their own holding their library under the cached library's name (which they
    can work out: the build is deterministic). The library loaded is the one checked, from a private
    directory in the cache, and nothing is made in ``$TMPDIR``."""
    built = kernels._build("srnn")
    other = _another_user()
    user = {"user": other[0], "group": other[1], "extra_groups": []} if other else {}
    command = [other[2] if other else sys.executable, "-c", TMPDIR_ATTACKER, str(open_tmpdir), built.name]
    attacker = subprocess.Popen(command, stdin=subprocess.PIPE, **user)
    try:
        attacker.stdin.write(attack.hostile.read_bytes())
        attacker.stdin.close()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert kernels.load_torch_ops("srnn")
    finally:
        attacker.kill()
        attacker.wait()
    assert not attack.marker.exists()
    assert list(open_tmpdir.iterdir()) == []
    ((copy, mode),) = attack.loaded
    assert copy.name == built.name and copy.parent.parent == attack.cache.resolve()
    assert copy.parent.name.startswith("load-") and mode == 0o700
    assert not copy.parent.exists()  # removed once loaded


@needs_cc
def test_a_copy_changed_before_it_is_loaded_is_refused(attack, monkeypatch):
    """The hash that decides is the one of the copy that is loaded, read back through its descriptor, not
    the one of the bytes that were meant to be copied."""
    real_copy = kernels._private_copy

    def copy_then_change(source, copy):
        fd = real_copy(source, copy)
        os.chmod(copy, 0o600)
        copy.write_bytes(attack.hostile.read_bytes())  # the same file, written in place
        return fd

    monkeypatch.setattr(kernels, "_private_copy", copy_then_change)
    with pytest.warns(RuntimeWarning, match="content does not match the hash in its name"):
        assert not kernels.load_torch_ops("srnn")
    assert not attack.marker.exists() and attack.loaded == []


def test_the_compiler_keeps_its_intermediate_files_in_the_private_build_directory(tmp_path, monkeypatch):
    """The compiler writes assembly and objects between its steps to ``$TMPDIR``; another user could swap
    them there. It gets the build's own directory instead."""
    log = tmp_path / "tmpdirs"
    compiler = tmp_path / "fake-compiler"
    compiler.write_text(
        f'#!/bin/sh\necho "$TMPDIR" >> {log}\n'
        'while [ $# -gt 0 ]; do if [ "$1" = -o ]; then out=$2; fi; shift; done\nprintf x > "$out"\n'
    )
    compiler.chmod(0o755)
    monkeypatch.setenv("LTDRNN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(kernels, "_toolchain", lambda: (str(compiler), [], []))
    built = kernels._build("srnn")
    used = [Path(line) for line in log.read_text().split()]
    assert len(used) == 2  # the compile and the link step
    assert all(d.parent == built.parent and d.name.startswith("build-") for d in used), used


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
