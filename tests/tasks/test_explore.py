"""The explorer's examples from each task's evaluator: hypotheses, scores and maps as decoding
gave them; a Transformer's maps per layer and head, replayed through its own steps; a CRNN's
self-attention per head over the line; captions and VQA answers with their maps over the
image's grid."""

import math

import pytest
import torch

from attnkit.data import ALPHABET, CharVocab, generate_lines, generate_scenes, question_set
from attnkit.decoding import Decoding
from attnkit.models import CRNN, Seq2Seq, Transformer
from attnkit.tasks.caption import CaptionTask, caption_images
from attnkit.tasks.evaluator import evaluator_for
from attnkit.tasks.explore import examples_of, explore_examples
from attnkit.tasks.ocr import read_lines
from attnkit.tasks.translate import translate_texts
from attnkit.tasks.vqa import VqaTask

CHARS = CharVocab("abcdef ")


def _evaluator(model):
    vocab = {"src": CHARS.to_json(), "tgt": CHARS.to_json()}
    return evaluator_for("translate")(model.eval(), {"task": "translate"}, vocab)


@pytest.mark.usefixtures("one_thread")
def test_a_transformer_gives_every_layer_and_head_and_its_mean_matches_decoding():
    torch.manual_seed(0)
    model = Transformer(len(CHARS), len(CHARS), d_model=16, heads=2, layers=2, ff=32)
    ev, sources = _evaluator(model), ["abc", "fed cab"]
    decoding = Decoding(beam=3, n_best=3)
    examples = explore_examples(ev, sources, decoding, names=["one", "two"])
    _, raws = translate_texts(model, CHARS, CHARS, sources, decoding=decoding, weights=True)
    assert [e.name for e in examples] == ["one", "two"]
    for b, (ex, source) in enumerate(zip(examples, sources)):
        assert list(ex.source) == list(source) and ex.text == source
        assert [h.score for h in ex.hypotheses] == pytest.approx(raws[0].scores[b].tolist())
        for k, hyp in enumerate(ex.hypotheses):
            assert list(hyp.maps) == ["mean of heads, last layer"] + [
                f"layer {i} / head {h}" for i in (1, 2) for h in (1, 2)
            ]
            n = len(hyp.tokens)
            assert n == int(raws[0].lengths[b, k])
            decoded = hyp.maps["mean of heads, last layer"]
            assert torch.allclose(decoded, raws[0].weights[b, k, :n, : len(source)])
            replayed = (hyp.maps["layer 2 / head 1"] + hyp.maps["layer 2 / head 2"]) / 2
            assert torch.allclose(replayed, decoded, atol=1e-5)
            first = hyp.maps["layer 1 / head 1"]
            assert first.shape == (n, len(source)) and not torch.allclose(first, decoded)
            assert torch.allclose(first.sum(-1), torch.ones(n), atol=1e-5)


@pytest.mark.usefixtures("one_thread")
def test_an_rnn_gives_one_map_and_a_model_without_attention_is_refused():
    torch.manual_seed(0)
    model = Seq2Seq(len(CHARS), len(CHARS), emb=8, hidden=16)
    [ex] = explore_examples(_evaluator(model), ["abc"], references=["cba"])
    assert ex.reference == "cba" and len(ex.hypotheses) == 1
    assert list(ex.hypotheses[0].maps) == ["attention"]
    plain = Seq2Seq(len(CHARS), len(CHARS), emb=8, hidden=16, kind="none")
    with pytest.raises(ValueError, match="checkpoint: its Seq2Seq model has no attention"):
        explore_examples(_evaluator(plain), ["abc"])


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("head", ["ctc", "attention"])
def test_a_crnn_gives_its_self_attention_per_head_beside_the_reading(head):
    torch.manual_seed(0)
    chars = CharVocab(list(ALPHABET))
    model = CRNN(
        len(chars),
        channels=(4, 4, 8, 8, 8),
        hidden=8,
        attention="window",
        window=3,
        heads=2,
        head=head,
        dec_hidden=8,
    ).eval()
    ev = evaluator_for("ocr")(model, {"task": "ocr"}, chars.to_json())
    images = [image for image, _ in generate_lines(2, seed=1, max_chars=6)]
    examples = explore_examples(ev, images, names=["a", "b"], references=["r", None])
    readings = read_lines(model, chars, images, weights=True)
    for ex, image, reading in zip(examples, images, readings):
        assert len(ex.source) == reading.steps == image.shape[1] // 2
        assert list(ex.input_maps) == [
            "encoder self-attention",
            "encoder self-attention / head 1",
            "encoder self-attention / head 2",
        ]
        torch.testing.assert_close(
            ex.input_maps["encoder self-attention / head 2"], reading.self_attention[1]
        )
        torch.testing.assert_close(
            ex.input_maps["encoder self-attention"], reading.self_attention.mean(0)
        )
        [hyp] = ex.hypotheses
        assert list(hyp.maps) == ["attention"] and ex.image is image
    assert [(e.name, e.reference) for e in examples] == [("a", "r"), ("b", None)]


@pytest.mark.usefixtures("one_thread")
def test_outputs_without_weights_and_a_crnn_without_attention_are_refused():
    torch.manual_seed(0)
    outputs = _evaluator(Seq2Seq(len(CHARS), len(CHARS), emb=8, hidden=16)).decode(["abc"])
    assert outputs[0].explore is None  # decoded without weights
    with pytest.raises(ValueError, match="outputs: expected outputs decoded with weights=True"):
        examples_of(outputs)
    chars = CharVocab(list(ALPHABET))
    plain = CRNN(len(chars), channels=(4, 4, 8, 8, 8), hidden=8).eval()
    ev = evaluator_for("ocr")(plain, {"task": "ocr"}, chars.to_json())
    images = [image for image, _ in generate_lines(1, seed=1, max_chars=6)]
    with pytest.raises(ValueError, match="checkpoint: its CRNN model has no attention"):
        explore_examples(ev, images)


MODEL = dict(image_size=32, channels=(4, 8), hidden=8, emb=8, attn_dim=8)


@pytest.mark.usefixtures("one_thread")
def test_a_captioner_gives_every_caption_with_its_words_maps_over_the_grid():
    scenes = generate_scenes(3, seed=1, size=32, max_objects=4)
    task = CaptionTask(scenes, scenes, model_config=MODEL)
    torch.manual_seed(0)
    model = task.build_model()
    ev = evaluator_for("caption")(model, task.config(), task.vocab())
    images = [s.image for s in scenes[:2]]
    decoding = Decoding(beam=3, n_best=2)
    examples = explore_examples(ev, images, decoding, references=[s.captions for s in scenes])
    captions = caption_images(
        model, task.words, images, max_words=task.max_words, decoding=decoding, weights=True
    )
    for ex, image, caption, scene in zip(examples, images, captions, scenes):
        assert ex.grid == (8, 8) and len(ex.source) == 64 and ex.reference == scene.captions
        assert torch.equal(ex.image, image.permute(1, 2, 0))
        assert [
            " ".join(h.tokens[:-1]) if h.tokens[-1] == "<eos>" else " ".join(h.tokens)
            for h in ex.hypotheses
        ] == caption.texts
        best = ex.hypotheses[0].maps["attention"]
        assert torch.allclose(best, caption.weights) and best.shape == (len(best), 64)
        assert ex.hypotheses[0].score >= ex.hypotheses[1].score
    none = CaptionTask(scenes, scenes, model_config={**MODEL, "attention": "none"})
    plain = evaluator_for("caption")(none.build_model(), none.config(), none.vocab())
    with pytest.raises(ValueError, match="checkpoint: its Captioner model has no attention"):
        explore_examples(plain, images)


@pytest.mark.usefixtures("one_thread")
def test_a_vqa_model_gives_its_answer_with_each_hops_map():
    images, questions = question_set(generate_scenes(2, seed=1, size=32, max_objects=4))
    task = VqaTask((images, questions), (images, questions), model_config={**MODEL, "hops": 3})
    torch.manual_seed(0)
    ev = evaluator_for("vqa")(task.build_model(), task.config(), task.vocab())
    asked = [(images[q.image], q.question) for q in questions[:3]]
    examples = explore_examples(ev, asked)
    for ex, (_image, question), answer in zip(examples, asked, ev.answer(asked)):
        [hyp] = ex.hypotheses
        assert ex.text == question and ex.grid == (8, 8)
        assert list(hyp.tokens) == ["hop 1", "hop 2", "hop 3"] and hyp.text == answer.answer
        assert hyp.score == pytest.approx(math.log(answer.probability))
        assert torch.equal(hyp.maps["attention"], answer.weights)
    none = VqaTask((images, questions), (images, questions), model_config={**MODEL, "kind": "none"})
    plain = evaluator_for("vqa")(none.build_model(), none.config(), none.vocab())
    with pytest.raises(ValueError, match="checkpoint: its VQA model has no attention"):
        explore_examples(plain, asked)
