"""translate_texts(): bounded input and output lengths, weights only on request."""

import pytest
import torch

from attnkit.tasks import translate as translate_task
from attnkit.tasks.translate import TranslateTask, translate_texts

PAIRS = [(f"<en> {w}", str(n)) for n, w in enumerate(["zero", "one", "two", "three"])]


@pytest.fixture
def task():
    torch.manual_seed(0)
    return TranslateTask(PAIRS, PAIRS, model_config={"kind": "bahdanau", "emb": 8, "hidden": 8})


def test_output_length_is_capped_whatever_the_checkpoint_says(task, monkeypatch):
    monkeypatch.setattr(translate_task, "MAX_OUTPUT_TOKENS", 9)
    model = task.build_model()
    with torch.no_grad():  # never emits EOS: the decoder runs to its cap
        model.decoder.out.bias[2] = -1e4
    _, raws = translate_texts(
        model, task.src_vocab, task.tgt_vocab, ["<en> one", "<en> two"], max_len_extra=10**12
    )
    assert raws[0].tokens.shape[1] == 9


def test_long_sources_are_refused_and_weights_kept_only_on_request(task):
    model = task.build_model()
    with pytest.raises(ValueError, match=r"texts\[1\]: 11 characters, more than max_chars=10"):
        translate_texts(
            model, task.src_vocab, task.tgt_vocab, ["<en> one", "<en> twelve"], max_chars=10
        )
    _, lean = translate_texts(model, task.src_vocab, task.tgt_vocab, ["<en> one"])
    _, kept = translate_texts(model, task.src_vocab, task.tgt_vocab, ["<en> one"], weights=True)
    assert lean[0].weights is None and kept[0].weights is not None


def test_validation_loss_is_the_mean_cross_entropy_per_target_token(task):
    # reference: each pair alone (no padding), -log p of every target token and EOS, summed
    # over pairs and divided by their tokens
    from attnkit.tokens import BOS, EOS

    model = task.build_model().eval()
    total, tokens = 0.0, 0
    with torch.no_grad():
        for source, target in PAIRS:
            src = torch.tensor([task.src_vocab.encode(source)])
            ids = [BOS, *task.tgt_vocab.encode(target), EOS]
            logits, _ = model(src, torch.tensor([src.shape[1]]), torch.tensor([ids[:-1]]))
            logp = torch.log_softmax(logits[0].double(), dim=-1)
            total -= float(logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].sum())
            tokens += len(ids) - 1
        scores = task.evaluate(model)
    # the batched float32 forward against float64 log-softmax: a few hundred roundings of
    # 2**-24 each in a model this small, 1e-5 leaves a wide margin
    assert scores["loss"] == pytest.approx(total / tokens, rel=1e-5)
    assert set(scores) == {"accuracy", "cer", "bleu", "bleu_char", "chrf", "loss"}


def test_a_shared_vocabulary_is_built_from_both_sides():
    pairs = [("<en> ab", "xy"), ("<en> ba", "yx")]
    shared = TranslateTask(pairs, pairs, model_config={"kind": "none"}, shared_vocab=True)
    assert shared.src_vocab is shared.tgt_vocab
    assert {"a", "b", "x", "y"} <= {shared.src_vocab.piece(i) for i in range(len(shared.src_vocab))}


def test_subword_sampling_draws_each_batch_by_its_pairs():
    pairs = [(f"<en> {w} {w}s", f"{w}en") for w in ["walk", "talk", "stalk", "chalk", "balk"] * 8]
    kw = dict(model_config={"kind": "none"}, vocab="unigram", vocab_size=40, shared_vocab=True)
    plain = TranslateTask(pairs, pairs, **kw)
    sampled = TranslateTask(pairs, pairs, subword_sampling=0.2, **kw)
    idx = list(range(len(pairs)))
    batch = sampled._collate(idx)
    # another process (a data worker, a resumed run) building the same batch gets the same ids
    again = TranslateTask(pairs, pairs, subword_sampling=0.2, **kw)
    assert all(torch.equal(batch[k], again._collate(idx)[k]) for k in batch)
    one_best = plain._collate(idx)
    assert not torch.equal(batch["src"], one_best["src"])
    assert int(batch["src_len"].sum()) > int(one_best["src_len"].sum())
    # every drawn segmentation is of the same pairs: sources and targets decode to them
    vocab = sampled.src_vocab
    for row, length, out, (source, target) in zip(
        batch["src"], batch["src_len"], batch["tgt_out"], pairs, strict=True
    ):
        assert vocab.decode(row[:length].tolist()) == source
        assert vocab.decode(out.tolist()) == target
    assert sampled.config()["batching"]["subword_sampling"] == 0.2


def test_subword_sampling_needs_subword_vocabularies_and_an_alpha_in_0_1():
    with pytest.raises(ValueError, match="subword_sampling: expected subword vocabularies"):
        TranslateTask(PAIRS, PAIRS, model_config={"kind": "none"}, subword_sampling=0.1)
    with pytest.raises(ValueError, match=r"subword_sampling: expected 0 \(off\) or a number"):
        TranslateTask(
            PAIRS, PAIRS, model_config={"kind": "none"}, vocab="unigram", subword_sampling=2
        )


def test_unlikelihood_adds_its_weighted_mean_per_target_token_to_the_loss():
    from attnkit.tokens import PAD
    from attnkit.train import token_unlikelihood

    pairs = [("<en> one", "eins eins"), ("<en> two", "zwei")]
    kw = dict(model_config={"kind": "bahdanau", "emb": 8, "hidden": 8})
    torch.manual_seed(0)
    plain = TranslateTask(pairs, pairs, **kw)
    weighted = TranslateTask(pairs, pairs, unlikelihood=0.5, **kw)
    model = plain.build_model()
    batch = plain._collate([0, 1])
    torch.manual_seed(1)
    ce, tokens = plain.loss(model, batch)
    torch.manual_seed(1)
    both, same_tokens = weighted.loss(model, batch)
    logits, _ = model(batch["src"], batch["src_len"], batch["tgt_in"])
    unlikely = token_unlikelihood(logits, batch["tgt_out"], PAD)
    assert float(unlikely.detach()) > 0 and same_tokens == tokens
    # the cross-entropy read from the log-softmax both terms share: float32 rounding apart
    torch.testing.assert_close(both, ce + 0.5 * unlikely / tokens)
    both.backward()  # one graph through the shared log-softmax
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    assert weighted.config()["batching"]["unlikelihood"] == 0.5
    assert "unlikelihood" not in plain.config()["batching"]
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="unlikelihood: expected a finite weight >= 0"):
            TranslateTask(pairs, pairs, unlikelihood=bad, **kw)


def test_max_tokens_batches_hold_that_many_padded_tokens_on_either_side():
    words = ["walk", "talk", "stalk", "chalk", "balk"]
    pairs = [
        (f"<en> {' '.join(words[: 1 + n % 5])}", " ".join(words[: 1 + (n * 3) % 5]) + "en")
        for n in range(60)
    ]
    task = TranslateTask(
        pairs, pairs, model_config={"kind": "none"}, vocab="unigram", vocab_size=40, max_tokens=48
    )
    batches = task.batches(epoch=0)
    seen = []
    for k in range(len(batches)):
        batch = batches[k]
        rows = batch["src"].shape[0]
        # the padded source, and the padded target with its <bos> or <eos>
        assert rows == 1 or batch["src"].numel() <= 48
        assert rows == 1 or batch["tgt_in"].numel() <= 48
        seen.append(rows)
    assert sum(seen) == len(pairs) and max(seen) > 1
    assert task.config()["batching"]["max_tokens"] == 48
    assert (
        "max_tokens"
        not in TranslateTask(pairs, pairs, model_config={"kind": "none"}).config()["batching"]
    )


def test_sentence_batches_group_pairs_by_their_longer_side():
    """Sources all alike, targets of 1 or 12 characters: each batch holds targets of one
    length (batched by the source alone, every batch would pad to 12)."""
    pairs = [("<en> abc", "x" if n % 2 else "y" * 12) for n in range(64)]
    task = TranslateTask(pairs, pairs, model_config={"kind": "none"}, batch_size=8)
    batches = task.batches(epoch=0)
    widths = [batches[k]["tgt_in"].shape[1] for k in range(len(batches))]
    assert sorted(widths) == [2] * 4 + [13] * 4  # with <bos>: no batch mixes the two
