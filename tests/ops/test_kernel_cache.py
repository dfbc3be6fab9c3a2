"""The compiled kernels' cache: the C++ kernels are loaded only from a cache directory that
belongs to the user and that no one else can write to, and only when the library's SHA-256 is
the one recorded when it was built; a cache that fails the first check is refused (attention
runs without the kernels), a library that fails the second is built again."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil

import pytest
import torch

from attnkit.ops import bindings, native

needs_native = pytest.mark.skipif(
    not native.available(), reason=f"no C++ kernels: {native.status()}"
)


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory):
    """A cache with the kernels built once for this module's tests."""
    cache = tmp_path_factory.mktemp("kernels") / "cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ATTNKIT_CACHE_DIR", str(cache))
        native._load()
    return cache


@pytest.fixture
def cache(built_cache, tmp_path, monkeypatch):
    """A copy of the built cache, used by ``native._load()``; its one library."""
    copy = tmp_path / "cache"
    shutil.copytree(built_cache, copy)
    monkeypatch.setenv("ATTNKIT_CACHE_DIR", str(copy))
    (library,) = copy.glob("kernels-*.so")
    return copy, library


def _works(lib):
    x = torch.tensor([0.5, -2.0])
    torch.testing.assert_close(bindings.tanh(x, lib=lib), torch.tanh(x))


def _recorded(library):
    return library.with_name(library.name + ".sha256").read_text().strip()


@needs_native
def test_the_build_records_the_library_hash_in_a_private_directory(cache):
    directory, library = cache
    assert _recorded(library) == hashlib.sha256(library.read_bytes()).hexdigest()
    for path in (directory, library, library.with_name(library.name + ".sha256")):
        st = path.stat()
        assert st.st_uid == os.getuid() and st.st_mode & 0o077 == 0, (path, oct(st.st_mode))
    _works(native._load())


@needs_native
@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777, 0o1777])
def test_a_cache_directory_others_can_write_to_is_refused(cache, mode, caplog):
    directory, library = cache
    directory.chmod(mode)
    message = (
        rf"^cache directory {directory} is writable by group or others \(mode "
        rf"{mode & 0o777:o}\): refusing to load compiled code from it; `chmod go-w "
    )
    with pytest.raises(native._Unavailable, match=message):
        native._load()
    fresh = native._Native()  # what attention sees: no kernels, a warning, and why
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        assert fresh.load() is None
    assert fresh.failure.startswith(f"cache directory {directory} is writable")
    assert "C++ additive kernels unavailable" in caplog.text
    assert sorted(directory.iterdir()) == sorted(
        [library, library.with_name(library.name + ".sha256")]
    )  # nothing built there either


def test_a_new_cache_directory_is_private_whatever_the_umask(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNKIT_CACHE_DIR", str(tmp_path / "new" / "cache"))
    old = os.umask(0)
    try:
        directory = native._private_cache_dir()
    finally:
        os.umask(old)
    assert directory == tmp_path / "new" / "cache"
    assert directory.stat().st_mode & 0o777 == 0o700


@needs_native
def test_a_cache_directory_of_another_user_is_refused(cache, monkeypatch):
    directory, _ = cache
    me = os.getuid()
    monkeypatch.setattr(native.os, "getuid", lambda: me + 1)
    with pytest.raises(
        native._Unavailable,
        match=rf"^cache directory {directory} belongs to uid "
        rf"{me}, not to this user \(uid {me + 1}\)",
    ):
        native._load()


@needs_native
@pytest.mark.parametrize("which, what", [("library", "cached library"), ("hash", "recorded hash")])
def test_a_cached_file_others_can_write_to_is_refused(cache, which, what):
    _, library = cache
    path = library if which == "library" else library.with_name(library.name + ".sha256")
    path.chmod(0o666)
    with pytest.raises(
        native._Unavailable,
        match=rf"^{what} {path} is writable by group or "
        r"others \(mode 666\)",
    ):
        native._load()


@needs_native
def test_a_library_that_is_not_the_one_built_is_built_again(cache, caplog):
    _, library = cache
    data = bytearray(library.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte changed
    library.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        lib = native._load()
    assert "is not the one recorded at build time" in caplog.text
    _works(lib)
    assert _recorded(library) == hashlib.sha256(library.read_bytes()).hexdigest()


@needs_native
def test_a_library_cached_without_a_hash_is_built_again(cache, caplog):
    _, library = cache
    library.with_name(library.name + ".sha256").unlink()
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        _works(native._load())
    assert f"no content hash recorded for {library}" in caplog.text
    assert _recorded(library) == hashlib.sha256(library.read_bytes()).hexdigest()


def test_a_cache_directory_that_is_a_file_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "not-a-directory"
    path.write_text("")
    monkeypatch.setenv("ATTNKIT_CACHE_DIR", str(path))
    with pytest.raises(native._Unavailable, match=rf"^cache directory {path} cannot be created"):
        native._private_cache_dir()
