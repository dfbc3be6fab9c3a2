"""The attention doctor passes attnkit's modules and finds each bug of the buggy fixtures, the
seeds' own among them (shared/seeds: 000's softmax over queries, 002's unmasked padding, 004's
query-independent score)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attnkit
from attnkit.attention import LocalPAttention, make_alignment
from attnkit.diagnose.checkup import CHECKS, assert_healthy, doctor


@pytest.fixture
def inputs():
    g = torch.Generator().manual_seed(0)
    return (
        torch.randn(3, 4, 8, generator=g),
        torch.randn(3, 6, 8, generator=g),
        torch.randn(3, 6, 8, generator=g),
    )


class Dot(nn.Module):
    """A correct user module; the subclasses each put one classic bug in it."""

    def __init__(self, dim: int = 8):
        super().__init__()
        self.w = nn.Linear(dim, dim, bias=False)

    def scores(self, query, key):
        return self.w(query) @ key.transpose(1, 2) / key.shape[-1] ** 0.5  # (B, Tq, Tk)

    def mask(self, scores, key_mask):
        return scores.masked_fill(~key_mask[:, None, :], torch.finfo(scores.dtype).min)

    def normalise(self, scores):
        return torch.softmax(scores, dim=-1)

    def zero(self, key, value, key_mask):
        return zero_padding(key, value, key_mask)

    def forward(self, query, key, value, key_mask):
        key, value = self.zero(key, value, key_mask)
        weights = self.normalise(self.mask(self.scores(query, key), key_mask))
        weights = weights * key_mask.any(-1)[:, None, None]  # rows with no key: zero weights
        return weights @ value, weights


def zero_padding(key, value, key_mask):
    """Padded keys and values zeroed: a weight of 0 times NaN padding is NaN."""
    pad = ~key_mask[..., None]  # (B, Tk, 1)
    return key.masked_fill(pad, 0), value.masked_fill(pad, 0)


class SoftmaxOverQueries(Dot):
    """A classic slip: F.softmax(scores, dim=1) on (bs, seq, seq) scores."""

    def normalise(self, scores):
        return F.softmax(scores, dim=1)


class NoMask(Dot):
    """A tutorial's attention: padded encoder steps are scored like the others."""

    def mask(self, scores, key_mask):
        return scores

    def zero(self, key, value, key_mask):
        return key, value


class InvertedMask(Dot):
    """Reads True as 'masked' (torch.nn.MultiheadAttention's polarity)."""

    def mask(self, scores, key_mask):
        return scores.masked_fill(key_mask[:, None, :], torch.finfo(scores.dtype).min)

    def zero(self, key, value, key_mask):
        return zero_padding(key, value, ~key_mask)


class NegInf(Dot):
    """-inf fills: an example with no key gives NaN."""

    def mask(self, scores, key_mask):
        return scores.masked_fill(~key_mask[:, None, :], float("-inf"))

    def forward(self, query, key, value, key_mask):
        key, value = self.zero(key, value, key_mask)
        weights = self.normalise(self.mask(self.scores(query, key), key_mask))
        return weights @ value, weights


class ConcatScore(Dot):
    """A decoder scoring e_j = w^T [s; h_j], whose query term the softmax cancels."""

    def __init__(self, dim: int = 8):
        super().__init__(dim)
        self.attn = nn.Linear(2 * dim, 1)

    def scores(self, query, key):
        b, tq, tk = query.shape[0], query.shape[1], key.shape[1]
        pair = torch.cat(
            [query[:, :, None].expand(b, tq, tk, -1), key[:, None].expand(b, tq, tk, -1)], dim=-1
        )
        return self.attn(pair).squeeze(-1)  # (B, Tq, Tk)


class ByPosition(Dot):
    """Adds a bias by key index: not permutation equivariant."""

    def scores(self, query, key):
        return super().scores(query, key) + 3 * torch.arange(key.shape[1], dtype=query.dtype)


class NaiveSoftmax(Dot):
    """exp() without subtracting the row's max: overflows in float16."""

    def normalise(self, scores):
        e = scores.exp()
        return e / e.sum(-1, keepdim=True)

    def mask(self, scores, key_mask):
        return scores.masked_fill(~key_mask[:, None, :], -1e4)


@pytest.mark.parametrize(
    "make",
    [
        lambda: attnkit.Attention(8, score="dot"),
        lambda: attnkit.Attention(8, score="scaled_dot", heads=2),
        lambda: attnkit.Attention(8, score="additive"),
        lambda: attnkit.Attention(8, score="general"),
        lambda: attnkit.Attention(8, score="cosine"),
        lambda: attnkit.Attention(8, score="additive", impl="chunked"),
        Dot,
    ],
    ids=[
        "DotScore",
        "ScaledDotScore",
        "AdditiveScore",
        "GeneralScore",
        "CosineScore",
        "AdditiveScore-chunked",
        "Dot",
    ],
)
def test_attnkits_modules_and_a_correct_user_module_pass_every_check(make, inputs):
    torch.manual_seed(0)  # the weights too, whatever ran before
    module = make()
    report = assert_healthy(module.eval(), inputs)
    assert [f.check for f in report.findings] == list(CHECKS)
    assert [f.verdict for f in report.findings[:6]] == ["pass"] * 6
    assert report["location_state"].verdict == "skip"


@pytest.mark.parametrize(
    "bug, failed",
    [
        (SoftmaxOverQueries, "sums_to_one_over_keys"),
        (NoMask, "mask_polarity"),
        (NoMask, "padding_invariance"),
        (InvertedMask, "mask_polarity"),
        (InvertedMask, "padding_invariance"),
        (NegInf, "empty_rows"),
        (ConcatScore, "query_dependence"),
        (ByPosition, "key_permutation"),
        (NaiveSoftmax, "low_precision"),
    ],
)
def test_each_bug_is_found_with_a_fix(bug, failed, inputs):
    torch.manual_seed(0)
    report = doctor(bug(), inputs)
    assert not report.ok
    assert report[failed].verdict == "fail" and report[failed].fix
    assert failed in str(report)


def test_the_inverted_mask_is_named_as_such(inputs):
    torch.manual_seed(0)
    assert "other way round" in doctor(InvertedMask(), inputs)["mask_polarity"].detail


def test_each_bug_fails_only_its_own_checks(inputs):
    torch.manual_seed(0)
    assert doctor(SoftmaxOverQueries(), inputs).failed()[0] == "sums_to_one_over_keys"
    assert doctor(ConcatScore(), inputs).failed() == ["query_dependence"]
    assert doctor(NegInf(), inputs).failed() == ["empty_rows"]
    assert doctor(ByPosition(), inputs).failed() == ["key_permutation"]


def test_assert_healthy_raises_with_the_report_and_allows_named_checks(inputs):
    with pytest.raises(AssertionError, match="key_permutation failed"):
        assert_healthy(ByPosition(), inputs)
    assert_healthy(ByPosition(), inputs, allow=("key_permutation",))
    with pytest.raises(ValueError, match="allow: expected names among"):
        assert_healthy(Dot(), inputs, allow=("nope",))


def test_bad_inputs_are_named(inputs):
    with pytest.raises(ValueError, match=r"example_inputs: expected \(query"):
        doctor(Dot(), inputs[:2])
    with pytest.raises(ValueError, match="expected Tq >= 2"):
        doctor(Dot(), (inputs[0][:, :1], inputs[1], inputs[2]))
    with pytest.raises(ValueError, match="expected B >= 2"):
        doctor(Dot(), tuple(t[:1] for t in inputs))


class Location(Dot):
    """A correct location-aware module (Chorowski et al. 2015): f = conv(prev),
    e_ij = v^T tanh(W q_i + U k_j + L f_ij); the subclasses each put one bug in it."""

    def __init__(self, dim: int = 8, filters: int = 4, kernel: int = 3):
        super().__init__(dim)
        self.conv = nn.Conv1d(1, filters, kernel, padding=kernel // 2, bias=False)
        self.q, self.k = nn.Linear(dim, dim), nn.Linear(dim, dim, bias=False)
        self.loc, self.v = nn.Linear(filters, dim, bias=False), nn.Linear(dim, 1, bias=False)

    def previous(self, prev, key_mask):
        return prev.masked_fill(~key_mask[:, None, :], 0)

    def forward(self, query, key, value, key_mask, prev_weights):
        b, tq, tk = prev_weights.shape
        if tk == 0:
            raise ValueError("key: expected Tk >= 1 (the conv reads neighbours), got 0")
        key, value = zero_padding(key, value, key_mask)
        prev = self.previous(prev_weights, key_mask).reshape(b * tq, 1, tk)
        f = self.conv(prev).reshape(b, tq, -1, tk).transpose(2, 3)  # (B, Tq, Tk, F)
        pre = self.q(query)[:, :, None] + self.k(key)[:, None] + self.loc(f)  # (B, Tq, Tk, D)
        scores = self.v(torch.tanh(pre)).squeeze(-1)  # (B, Tq, Tk)
        weights = self.normalise(self.mask(scores, key_mask)) * key_mask.any(-1)[:, None, None]
        return weights @ value, weights


class LeakyLocation(Location):
    """The conv reads the previous weights of padded keys."""

    def previous(self, prev, key_mask):
        return prev


class DeafLocation(Location):
    """Takes the previous weights and never uses them."""

    def previous(self, prev, key_mask):
        return torch.zeros_like(prev)


@pytest.mark.parametrize(
    "module, location",
    [
        (attnkit.Attention(8, score="location"), None),
        (attnkit.Attention(8, score="location", heads=2, location_kernel=3), None),
        (attnkit.Attention(8, score="location", impl="chunked"), None),
        (Location(), True),
    ],
    ids=["attnkit", "attnkit-heads", "attnkit-chunked", "user"],
)
def test_location_modules_get_their_state_and_pass(module, location, inputs):
    torch.manual_seed(0)
    report = assert_healthy(module.eval(), inputs, location=location)
    assert report["location_state"].verdict == "pass"
    assert report["key_permutation"].verdict == "skip"
    assert "order matters by design" in report["key_permutation"].detail
    assert [f.verdict for f in report.findings[:5]] == ["pass"] * 5


def test_a_location_conv_that_reads_padding_is_caught_with_its_fix(inputs):
    torch.manual_seed(0)
    report = doctor(LeakyLocation(), inputs, location=True)
    assert report.failed() == ["location_state"]
    finding = report["location_state"]
    assert "weight on padded keys in the previous weights moved the context" in finding.detail
    assert "prev.masked_fill(~key_mask[:, None, :], 0)" in finding.fix


def test_previous_weights_that_never_reach_the_score_are_caught(inputs):
    torch.manual_seed(0)
    report = doctor(DeafLocation(), inputs, location=True)
    assert report.failed() == ["location_state"]
    assert "same for any previous weights" in report["location_state"].detail
    assert "conv(prev_weights)" in report["location_state"].fix


def test_location_must_be_a_bool(inputs):
    with pytest.raises(ValueError, match="location: expected None, True or False, got 'yes'"):
        doctor(Location(), inputs, location="yes")


def test_a_call_adapts_another_signature_torchs_multihead_attention_nans_twice(inputs):
    """torch.nn.MultiheadAttention gives NaN for an example with no key, and lets NaN padding
    through (a weight of 0 times NaN)."""
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    report = doctor(mha, inputs, call=lambda m, q, k, v, mask: m(q, k, v, key_padding_mask=~mask))
    assert report.failed() == ["empty_rows", "nan_padding"]


# ---------------------------------------------------------------- modules that carry a state


class Monotonic(nn.Module):
    """A correct user monotonic attention (Raffel et al. 2017): p_ij = sigmoid(e_ij) and the
    recurrence q_j = (1 - p_{i,j-1}) q_{j-1} + alpha_{i-1,j}, alpha_ij = p_ij q_j; the state is
    alpha (B, Tk). The subclasses each put one bug in it."""

    weight_sums = "non_increasing"

    def __init__(self, dim: int = 8):
        super().__init__()
        self.w = nn.Linear(dim, dim, bias=False)
        self.r = nn.Parameter(torch.tensor(0.5))

    def zero(self, key, value, key_mask):
        return zero_padding(key, value, key_mask)

    def probabilities(self, query, key, key_mask):
        e = self.w(query) @ key.transpose(1, 2) / key.shape[-1] ** 0.5 + self.r  # (B, Tq, Tk)
        return torch.sigmoid(e) * key_mask[:, None, :]

    def step(self, p, prev):
        """alpha_i (B, Tk) from p_i and alpha_{i-1} (B, Tk)."""
        alpha, q, stay = [], 0.0, 1.0
        for j in range(p.shape[-1]):
            q = stay * q + prev[:, j]
            alpha.append(p[:, j] * q)
            stay = 1 - p[:, j]
        return torch.stack(alpha, -1) if alpha else p.clone()

    def start(self, key):
        state = key.new_zeros(key.shape[:2])
        state[:, :1] = 1.0
        return state

    def weigh(self, alpha):
        return alpha

    def forward(self, query, key, value, key_mask, state):
        key, value = self.zero(key, value, key_mask)
        p = self.probabilities(query, key, key_mask)
        state = self.start(key) if state is None else state
        weights = []
        for i in range(query.shape[1]):
            state = self.step(p[:, i], state)
            weights.append(self.weigh(state))
        weights = torch.stack(weights, 1)  # (B, Tq, Tk)
        return weights @ value, weights, state


class LeakyMonotonic(Monotonic):
    """Stops at padded keys too, and reads their values."""

    def zero(self, key, value, key_mask):
        return key, value

    def probabilities(self, query, key, key_mask):
        return super().probabilities(query, key, torch.ones_like(key_mask))


class NaNValues(Monotonic):
    """Masks the probabilities but keeps NaN padding in the values: 0 * NaN is NaN."""

    def zero(self, key, value, key_mask):
        return key, value


class ClosedForm(Monotonic):
    """The paper's closed form alpha = p * cumprod(1 - p) * cumsum(prev / cumprod(1 - p)):
    divides by 0 once a probability is 1."""

    def step(self, p, prev):
        stay = torch.cumprod(torch.cat([torch.ones_like(p[:, :1]), 1 - p[:, :-1]], -1), -1)
        return p * stay * torch.cumsum(prev / stay, -1)


class MassCreating(Monotonic):
    """Forgets the product of stay probabilities: alpha_ij = p_ij sum_{k<=j} alpha_{i-1,k}."""

    def step(self, p, prev):
        return p * prev.cumsum(-1)


class Renormalised(Monotonic):
    """Divides the weights by their sum, which is 0 for an example with no key."""

    def weigh(self, alpha):
        return alpha / alpha.sum(-1, keepdim=True)


class NaiveSigmoid(Monotonic):
    """p = exp(e) / (1 + exp(e)): inf / inf once exp overflows."""

    def probabilities(self, query, key, key_mask):
        e = self.w(query) @ key.transpose(1, 2) / key.shape[-1] ** 0.5 + self.r
        return e.exp() / (1 + e.exp()) * key_mask[:, None, :]


class Restarting(Monotonic):
    """Ignores the state it is given: every call starts at the first key again."""

    def forward(self, query, key, value, key_mask, state):
        return super().forward(query, key, value, key_mask, None)


class Memoryless(Monotonic):
    """Every output step starts from the first key: the state it returns reaches nothing."""

    def step(self, p, prev):
        return super().step(p, self.start(p[..., None]))


class DoublePrepared(Monotonic):
    """prepare() projects the keys that the call projects again."""

    def prepare(self, key, value):
        return key @ self.w.weight, value

    def forward(self, query, key, value, key_mask, state):
        if isinstance(key, tuple):
            key, value = key
        return super().forward(query, key, value, key_mask, state)


class EmptyWindow(LocalPAttention):
    """local-p as it was with half_width=0: a window |j - p| <= 0 around a real-valued centre
    holds no key, so every query reads nothing."""

    radius = 0.0


def _alignment(name, **options):
    torch.manual_seed(0)
    return make_alignment(name, 8, **options)


@pytest.mark.parametrize(
    "make, mode",
    [
        (lambda: _alignment("monotonic", noise=0.0, r_init=0.0), "train"),
        (lambda: _alignment("monotonic", r_init=0.0), "eval"),
        (lambda: _alignment("monotonic", inference="soft"), "eval"),
        (lambda: _alignment("mocha", chunk=1, noise=0.0, r_init=0.0), "train"),
        (lambda: _alignment("mocha", chunk=2, noise=0.0, r_init=0.5), "train"),
        (lambda: _alignment("mocha", chunk=3, r_init=0.0, block=2), "eval"),
        (lambda: _alignment("mocha", chunk=3, inference="soft", attn_dim=4, chunk_dim=6), "eval"),
        (lambda: _alignment("local_p", half_width=0), "train"),
        (lambda: _alignment("local_p", half_width=1, score="additive"), "train"),
        (lambda: _alignment("local_p", half_width=3, score="dot"), "train"),
        (lambda: _alignment("gmm", components=1), "train"),
        (lambda: _alignment("gmm", components=3), "train"),
    ],
    ids=[
        "monotonic-train",
        "monotonic-hard",
        "monotonic-soft",
        "mocha1-train",
        "mocha2-train",
        "mocha3-hard",
        "mocha3-soft",
        "local_p0",
        "local_p1-additive",
        "local_p3-dot",
        "gmm1",
        "gmm3",
    ],
)
def test_attnkits_alignments_pass_every_check_that_applies(make, mode, inputs):
    module = make().train(mode == "train")
    report = assert_healthy(module, inputs)
    assert [f.check for f in report.findings] == list(CHECKS)
    assert report.skipped()[:3] == ["sums_to_one_over_keys", "key_permutation", "location_state"]
    assert "order matters by design" in report["key_permutation"].detail
    for check in (
        "mask_polarity",
        "padding_invariance",
        "empty_rows",
        "low_precision",
        "weight_sums",
        "nan_padding",
        "prepared_memory",
        "state_threading",
    ):
        assert report[check].verdict == "pass", report[check]
    assert report["query_dependence"].verdict == "pass"
    assert repr(module.weight_sums) in report["weight_sums"].detail
    gmm = module.name == "gmm"
    assert report["saturation"].verdict == ("skip" if gmm else "pass")
    stateless = module.name == "local_p"
    assert ("returns no state" in report["state_threading"].detail) == stateless


def test_a_hard_monotonic_reader_that_never_stops_passes_and_says_what_was_not_seen(inputs):
    report = assert_healthy(_alignment("monotonic").eval(), inputs)  # r_init = -4: no stop
    assert report["query_dependence"].verdict == "skip"
    assert "was not seen" in report["state_threading"].detail


def test_a_correct_user_module_with_state_passes(inputs):
    torch.manual_seed(0)
    report = assert_healthy(Monotonic(), inputs, stateful=True)
    assert report.skipped() == [
        "sums_to_one_over_keys",
        "key_permutation",
        "location_state",
        "prepared_memory",
    ]
    assert "no prepare" in report["prepared_memory"].detail


@pytest.mark.parametrize(
    "bug, failed, said",
    [
        (LeakyMonotonic, "mask_polarity", "keys whose mask is False"),
        (LeakyMonotonic, "padding_invariance", "moved the context"),
        (NaNValues, "nan_padding", "reached the context"),
        (ClosedForm, "saturation", "NaN/inf reached"),
        (MassCreating, "weight_sums", "more than the previous step's"),
        (Renormalised, "empty_rows", "NaN/inf in the context"),
        (NaiveSigmoid, "low_precision", "torch.float16"),
        (Restarting, "state_threading", "one output step at a time"),
        (Memoryless, "state_threading", "same for any previous state"),
        (DoublePrepared, "prepared_memory", "differs from the call over the tensors"),
    ],
)
def test_each_bug_of_a_module_with_state_is_found_with_a_fix(bug, failed, said, inputs):
    torch.manual_seed(0)
    report = doctor(bug(), inputs, stateful=True)
    assert report[failed].verdict == "fail" and report[failed].fix, report
    assert said in report[failed].detail


def test_bugs_with_state_fail_only_their_own_checks(inputs):
    for bug, failed in [
        (NaNValues, ["nan_padding"]),
        (ClosedForm, ["low_precision", "saturation"]),
        (MassCreating, ["weight_sums"]),
        (Restarting, ["state_threading"]),
        (Memoryless, ["weight_sums", "state_threading"]),
    ]:
        torch.manual_seed(0)
        assert doctor(bug(), inputs, stateful=True).failed() == failed, bug


def test_a_local_p_window_that_holds_no_key_is_caught(inputs):
    torch.manual_seed(0)
    report = doctor(EmptyWindow(8, half_width=0), inputs)
    assert report.failed() == ["weight_sums"]
    assert "reads none of them" in report["weight_sums"].detail


def test_a_module_with_state_must_return_its_state_and_declare_a_known_law(inputs):
    torch.manual_seed(0)
    with pytest.raises(ValueError, match=r"call: expected \(context, weights, state\)"):
        doctor(Dot(), inputs, stateful=True, call=lambda m, q, k, v, mask, state: m(q, k, v, mask))
    module = Monotonic()
    module.weight_sums = "two"
    with pytest.raises(ValueError, match="module.weight_sums: expected one of one, at_most_one"):
        doctor(module, inputs, stateful=True)
    del Monotonic.weight_sums
    try:
        report = doctor(Monotonic(), inputs, stateful=True)
    finally:
        Monotonic.weight_sums = "non_increasing"
    assert report["weight_sums"].verdict == "skip"
    assert "declares no weight_sums" in report["weight_sums"].detail


def test_location_and_stateful_are_exclusive_and_bools(inputs):
    with pytest.raises(ValueError, match="stateful: expected None, True or False, got 'yes'"):
        doctor(Monotonic(), inputs, stateful="yes")
    with pytest.raises(ValueError, match="location, stateful: expected at most one True"):
        doctor(Monotonic(), inputs, stateful=True, location=True)
