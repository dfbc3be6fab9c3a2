"""Devices and precisions: what --device and --precision accept, and moving batches."""

from collections import namedtuple

import pytest
import torch

from attnkit.train import autocast, check_precision, resolve_device, to_device

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


def test_auto_and_cpu():
    want = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == want
    assert resolve_device(" CPU ") == torch.device("cpu")


@pytest.mark.parametrize("spec", ["gpu", "cuda:x", "cuda:-1", "", "cpu:0", "mps"])
def test_other_strings_name_the_accepted_ones(spec):
    with pytest.raises(
        ValueError,
        match=rf"^device: expected auto, cpu, cuda or cuda:N, got "
        rf"'{spec}'$",
    ):
        resolve_device(spec)


@no_cuda
@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_without_cuda_is_refused(spec):
    with pytest.raises(
        ValueError,
        match=rf"^device: '{spec}' needs CUDA, which this machine "
        r"lacks \(torch.cuda.is_available\(\) is False\); "
        r"expected auto or cpu$",
    ):
        resolve_device(spec)


@needs_cuda
def test_cuda_indices(monkeypatch):
    count = torch.cuda.device_count()
    assert resolve_device("cuda") == torch.device("cuda", 0)
    assert resolve_device(f"cuda:{count - 1}") == torch.device("cuda", count - 1)
    with pytest.raises(ValueError, match=rf"^device: expected cuda:0 .. cuda:{count - 1} "):
        resolve_device(f"cuda:{count}")
    # under torchrun, each process takes the GPU of its LOCAL_RANK
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", str(count - 1))
    assert resolve_device("auto") == resolve_device("cuda") == torch.device("cuda", count - 1)
    if count > 1:
        with pytest.raises(
            ValueError,
            match=rf"^device: under torchrun each process takes "
            rf"cuda:LOCAL_RANK \(cuda:{count - 1} here\), "
            r"got 'cuda:0'",
        ):
            resolve_device("cuda:0")


def test_precisions_the_device_cannot_train_in_are_refused():
    check_precision("fp32", torch.device("cpu"))
    check_precision("bf16", torch.device("cpu"))
    with pytest.raises(
        ValueError,
        match=r"^precision: fp16 trains on CUDA only \(float16 "
        r"autocast with a GradScaler\), the device is cpu; use "
        r"bf16 or fp32$",
    ):
        check_precision("fp16", torch.device("cpu"))
    with pytest.raises(
        ValueError,
        match=r"^precision: expected one of fp32, bf16, fp16, got "
        r"'fp8'$",
    ):
        check_precision("fp8", torch.device("cpu"))


@needs_cuda
def test_bf16_on_a_gpu_without_it_is_refused(monkeypatch):
    device = torch.device("cuda", 0)
    check_precision("fp16", device)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (7, 5))
    with pytest.raises(
        ValueError,
        match=r"^precision: bf16 needs a GPU with bfloat16, .* "
        r"\(cuda:0\) has none; use fp16 or fp32$",
    ):
        check_precision("bf16", device)


def test_autocast_contexts():
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with autocast(torch.device("cpu"), "fp32"):
        assert (a @ b).dtype == torch.float32
    with autocast(torch.device("cpu"), "bf16"):
        assert (a @ b).dtype == torch.bfloat16


Pair = namedtuple("Pair", "left right")


def test_to_device_moves_every_tensor_and_keeps_the_structure():
    batch = {
        "src": torch.ones(2, 3),
        "parts": [torch.zeros(1), (torch.ones(1), 5)],
        "pair": Pair(torch.ones(1), "text"),
        "n": 2,
    }
    moved = to_device(batch, torch.device("cpu"))
    assert moved["n"] == 2 and moved["pair"].right == "text" and isinstance(moved["pair"], Pair)
    assert isinstance(moved["parts"], list) and isinstance(moved["parts"][1], tuple)
    assert torch.equal(moved["src"], batch["src"])


@needs_cuda
def test_to_device_moves_to_the_gpu():
    batch = {"src": torch.ones(2, 3).pin_memory(), "parts": [torch.zeros(1)]}
    moved = to_device(batch, torch.device("cuda", 0), non_blocking=True)
    assert moved["src"].device.type == moved["parts"][0].device.type == "cuda"
