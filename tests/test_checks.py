"""attnkit.checks: the shared input checks' helpers."""

import torch
import torch.nn as nn

from attnkit import Attention
from attnkit.checks import first_parameter
from attnkit.models import Transformer


def _modules() -> list[nn.Module]:
    no_bias_first = nn.Linear(3, 2)
    no_bias_first.register_parameter("extra", None)  # a None entry is skipped
    shared = nn.Linear(2, 2)
    tied = nn.Sequential(shared, shared)
    empty_then_full = nn.Sequential(nn.ReLU(), nn.Sequential(), nn.Linear(2, 1))
    return [
        nn.Linear(3, 2),
        nn.Sequential(nn.ReLU(), nn.Linear(2, 4)),
        no_bias_first,
        tied,
        empty_then_full,
        nn.ReLU(),
        Attention(8, heads=2),
        Attention(8, score="additive"),
        Transformer(10, 10, d_model=8, heads=2, layers=1),
    ]


def test_first_parameter_is_the_first_of_parameters():
    for module in _modules():
        assert first_parameter(module) is next(module.parameters(), None), module


def test_first_parameter_follows_a_module_moved_to_another_dtype():
    module = nn.Sequential(nn.ReLU(), nn.Linear(2, 2)).double()
    p = first_parameter(module)
    assert p is not None and p.dtype == torch.float64
