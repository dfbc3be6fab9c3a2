"""Evaluators: a new task scores its checkpoints through ``attnkit eval`` by registering one;
the shared metrics."""

import json

import pytest

from attnkit.cli.main import main
from attnkit.data import read_tsv
from attnkit.models import Seq2Seq, model_config
from attnkit.tasks import EVALUATORS, Evaluator, evaluator_for
from attnkit.tasks.evaluator import Example, Output
from attnkit.tasks.metrics import METRICS, closest_reference, example_cer, score, signature
from attnkit.train import save_checkpoint


@pytest.fixture
def upper_task():
    """A task whose 'model' writes its input in capitals, registered for the test only."""

    class Upper(Evaluator, task="test-upper"):
        data = "a TSV of text<TAB>capitals"
        metrics = ("exact", "cer")

        def read(self, path):
            return [Example(a, b, f"{path}:{n}") for n, (a, b) in enumerate(read_tsv(path), 1)]

        def decode(self, inputs, decoding=None, *, weights=False):
            return [Output([text.upper()], lambda path, title=None: None) for text in inputs]

    yield Upper
    del EVALUATORS["test-upper"]


def test_a_registered_task_is_scored_by_attnkit_eval_unchanged(upper_task, tmp_path, capsys):
    assert evaluator_for("test-upper") is upper_task
    ck = save_checkpoint(
        tmp_path / "ck",
        model=Seq2Seq(5, 5, emb=4, hidden=4),
        config={"task": "test-upper", "model": model_config(Seq2Seq(5, 5, emb=4, hidden=4))},
        vocab={"unused": True},
    )
    data = tmp_path / "data.tsv"
    data.write_text("abc\tABC\nxyz\tXYy\n")
    assert (
        main(
            [
                "eval",
                "--checkpoint",
                str(ck),
                "--data",
                str(data),
                "--json",
                "--plot",
                str(tmp_path / "pics"),
                "--worst",
                "1",
            ]
        )
        == 0
    )
    got = json.loads(capsys.readouterr().out)
    assert got["metrics"] == {"exact": 0.5, "cer": pytest.approx(1 / 6)}
    assert got["worst"] == [
        {
            "origin": f"{data}:2",
            "reference": "XYy",
            "output": "XYZ",
            "cer": pytest.approx(1 / 3),
            "picture": None,
        }
    ]


def test_registration_errors_name_the_problem(upper_task):
    with pytest.raises(ValueError, match="task: an evaluator for 'test-upper' is already"):
        type("Again", (upper_task,), {}, task="test-upper")
    with pytest.raises(
        ValueError,
        match=r"metrics: expected names among exact, cer, wer, "
        r"bleu, bleu_char, chrf, got \['rouge'\]",
    ):
        type("Rouge", (upper_task,), {"metrics": ("rouge",)}, task="test-rouge")
    with pytest.raises(
        ValueError,
        match=r"task: expected one of asr, caption, ocr, .*translate, "
        r"vqa, got 'poems'",
    ):
        evaluator_for("poems")


def test_metrics_on_known_values():
    hyps, refs = ["the cat sat", "", "a dog"], ["the cat sat", "on", "a dot"]
    got = score(list(METRICS), hyps, refs)
    assert got["exact"] == pytest.approx(1 / 3)
    assert got["cer"] == pytest.approx((0 + 2 + 1) / (11 + 2 + 5))  # corpus: edits / chars
    assert got["wer"] == pytest.approx((0 + 1 + 1) / (3 + 1 + 2))
    assert score(("bleu_char", "chrf"), refs, refs) == pytest.approx(
        {"bleu_char": 100.0, "chrf": 100.0}
    )
    assert example_cer("a dog", "a dot") == pytest.approx(1 / 5)
    with pytest.raises(ValueError, match=r"names: expected metrics among .*, got \['f1'\]"):
        score(["f1"], hyps, refs)
    with pytest.raises(ValueError, match=r"hypotheses: expected one per reference \(3\), got 2"):
        score(["cer"], hyps[:2], refs)


def test_metrics_against_several_references():
    hyps = ["a red circle", "a blue square at the top"]
    refs = [
        ("a red circle", "a circle"),
        ("a blue square at the left", "a blue square at the top", "a square"),
    ]  # examples with 2 and 3 references
    got = score(("exact", "bleu", "chrf"), hyps, refs)
    assert got == pytest.approx({"exact": 1.0, "bleu": 100.0, "chrf": 100.0})
    one = score(("exact", "bleu", "chrf"), hyps, [r[0] for r in refs])  # the first alone
    assert one["exact"] == 0.5 and one["bleu"] < 100 and one["chrf"] < 100
    assert score(("bleu",), ["a b c d"], ["a b c d"]) == pytest.approx({"bleu": 100.0})
    assert closest_reference("a blue square at the tip", refs[1]) == "a blue square at the top"
    assert example_cer("a blue square at the tip", refs[1]) == pytest.approx(1 / 24)
    with pytest.raises(
        ValueError,
        match=r"references\[1\]: cer scores against one reference "
        r"text, got 3",
    ):
        score(["cer"], hyps, ["a red circle", refs[1]])


def test_every_metric_compares_the_same_normalised_texts():
    """Surrounding and repeated white space, and Unicode composition, count for no metric."""
    got = score(
        list(METRICS),
        ["we met on 3 March 2001 in the caf\u00e9"],
        [" we met  on 3 March 2001 in the cafe\u0301 "],
    )
    assert got == pytest.approx(
        {"exact": 1.0, "cer": 0.0, "wer": 0.0, "bleu": 100.0, "bleu_char": 100.0, "chrf": 100.0}
    )


def test_bleu_is_sacrebleu_s_standard_and_bleu_char_its_character_variant():
    import sacrebleu

    hyps = ["the cat sat on the mat today", "a dog ran in the park at noon"]
    refs = ["the cat sat on a mat today", "a dog ran in the park at night"]
    assert score(("bleu", "bleu_char"), hyps, refs) == pytest.approx(
        {
            "bleu": sacrebleu.corpus_bleu(hyps, [refs]).score,
            "bleu_char": sacrebleu.corpus_bleu(hyps, [refs], tokenize="char").score,
        }
    )
    assert signature("bleu").startswith("nrefs:1|case:mixed|eff:no|tok:13a|")
    assert "tok:char" in signature("bleu_char") and signature("cer") is None


def test_outputs_carry_the_score_of_every_text_best_first():
    from attnkit.decoding import Decoding
    from attnkit.tasks.loading import load_evaluator

    evaluator = load_evaluator("builtin:translate-dates")
    beam, greedy = (
        evaluator.decode(["<en> 3 March 2001", "<en> 1 May 1990"], d)
        for d in (Decoding(beam=4, n_best=3), Decoding())
    )
    for output in beam:
        assert len(output.scores) == len(output.texts) == 3
        assert output.scores == sorted(output.scores, reverse=True)
    assert [len(o.scores) for o in greedy] == [1, 1]
    assert all(s < 0 for o in greedy for s in o.scores)  # summed log-probabilities
