"""``ATTNKIT_NATIVE_ARCH``: the C++ kernels built as another x86-64 CPU would build them (an
x86-64 level instead of ``-march=native``), so one machine can check the builds its users' CPUs
make; levels this CPU cannot run and unknown values are refused with the reason."""

from __future__ import annotations

import platform

import pytest
import torch

from attnkit.ops import bindings, native

x86 = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64"),
    reason=f"x86-64 levels need an x86-64 CPU, this is {platform.machine()}",
)
needs_compiler = pytest.mark.skipif(
    not native.available(), reason=f"no C++ kernels: {native.status()}"
)


@pytest.fixture
def builds(tmp_path, monkeypatch):
    """A fresh cache, and the flags of every build made in it."""
    monkeypatch.setenv("ATTNKIT_CACHE_DIR", str(tmp_path / "cache"))
    made = []
    build = native._build
    monkeypatch.setattr(
        native, "_build", lambda cxx, flags, path: (made.append(flags), build(cxx, flags, path))
    )
    return made


@x86
@needs_compiler
def test_a_level_builds_without_native_flags_and_computes_the_same(builds, monkeypatch):
    monkeypatch.setenv("ATTNKIT_NATIVE_ARCH", "x86-64")
    lib = native._load()
    assert builds and builds[0][0] == "-march=x86-64"
    assert not any("native" in flag for flags in builds for flag in flags)
    x = torch.linspace(-5, 5, 101)
    # the same arithmetic on another build: within the float tanh's error of each other
    assert (bindings.tanh(x, lib=lib) - bindings.tanh(x)).abs().max() < 2e-6
    monkeypatch.setenv("ATTNKIT_NATIVE_ARCH", "native")
    native._load()
    assert "-march=native" in builds[-1]  # another library, not the level's from the cache


def test_an_unknown_value_is_refused_naming_the_setting(monkeypatch):
    monkeypatch.setenv("ATTNKIT_NATIVE_ARCH", "skylake")
    with pytest.raises(
        native._Unavailable,
        match=r"^ATTNKIT_NATIVE_ARCH: expected native or one of x86-64, "
        r"x86-64-v2, x86-64-v3, x86-64-v4, got 'skylake'$",
    ):
        native._load()


@x86
def test_a_level_this_cpu_cannot_run_is_refused_with_what_it_lacks(monkeypatch):
    monkeypatch.setenv("ATTNKIT_NATIVE_ARCH", "x86-64-v4")
    monkeypatch.setattr(native, "_cpu", lambda: "flags\t\t: fpu sse sse2 avx avx2 fma\n")
    with pytest.raises(
        native._Unavailable,
        match=r"^ATTNKIT_NATIVE_ARCH=x86-64-v4: this CPU "
        r"lacks cx16, .*avx512f, avx512bw",
    ):
        native._load()


def test_a_level_on_another_architecture_is_refused(monkeypatch):
    monkeypatch.setenv("ATTNKIT_NATIVE_ARCH", "x86-64")
    monkeypatch.setattr(native.platform, "machine", lambda: "aarch64")
    with pytest.raises(native._Unavailable, match="an x86-64 level, but this machine is aarch64"):
        native._load()
