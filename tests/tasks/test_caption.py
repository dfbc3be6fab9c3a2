"""CaptionTask: the loss is Xu et al.'s objective, the metrics score what they say, the
attention check finds the named object, and a few steps of training lower the loss; the
evaluator reads built-in scenes and the user's folders and scores what validation scores."""

import pytest
import torch
import torch.nn.functional as F

from attnkit.data import CaptionedImage, DataError, generate_scenes, write_caption_folder
from attnkit.data.worlds.scenes import SCORED_SCENES, Scene, SceneObject, render
from attnkit.decoding import Decoding
from attnkit.models import doubly_stochastic
from attnkit.tasks.caption import (
    CaptionEvaluator,
    CaptionOutput,
    CaptionTask,
    attention_on_objects,
    caption_examples,
    caption_images,
    scene_metrics,
)
from attnkit.tasks.evaluator import score_examples
from attnkit.tokens import PAD
from attnkit.train import TrainConfig, Trainer

MODEL = dict(image_size=32, channels=(4, 8), hidden=16, emb=8, attn_dim=8)


@pytest.fixture(scope="module")
def scenes():
    return generate_scenes(8, seed=2, size=32, max_objects=4)


def test_loss_is_nll_plus_lambda_times_the_penalty_per_word(scenes):
    task = CaptionTask(scenes, scenes[:2], model_config=MODEL, doubly_stochastic=0.5, batch_size=4)
    torch.manual_seed(0)
    model = task.build_model()
    batch = task.batches(0)[0]
    loss, words = task.loss(model, batch)
    torch.manual_seed(0)
    out = model(batch["images"], batch["tgt_in"])
    mask = batch["tgt_out"] != PAD
    nll = F.cross_entropy(
        out.logits.transpose(1, 2), batch["tgt_out"], ignore_index=PAD, reduction="sum"
    )
    expected = (nll + 0.5 * doubly_stochastic(out.weights, mask).sum()) / mask.sum()
    assert words == int(mask.sum()) and words > 4 * 4
    torch.testing.assert_close(loss, expected)
    plain = CaptionTask(scenes, scenes[:2], model_config=MODEL, doubly_stochastic=0.0, batch_size=4)
    torch.testing.assert_close(plain.loss(model, batch)[0], nll / mask.sum())


def test_hard_attention_adds_reinforce_and_moves_the_baseline(scenes):
    task = CaptionTask(
        scenes, scenes[:2], model_config={**MODEL, "attention": "hard"}, batch_size=4
    )
    torch.manual_seed(0)
    model = task.build_model()
    loss, _ = task.loss(model, task.batches(0)[0])
    loss.backward()
    assert bool(model.baseline_set) and float(model.baseline) < 0  # a mean log-likelihood
    score = model.attention.score
    assert score.v.grad is not None and score.v.grad.abs().sum() > 0  # where to look learns


def _outputs(texts, weights=None):
    return [
        CaptionOutput([t], lambda path, title=None: None, weights=w)
        for t, w in zip(texts, weights or [None] * len(texts))
    ]


def test_the_evaluator_scores_every_reference_and_the_scenes(scenes):
    task = CaptionTask(scenes, scenes[:2], model_config=MODEL)
    ev = CaptionEvaluator(task.build_model(), task.config(), task.vocab())
    refs = [("a red circle at the top", "a red circle above a blue square"), ("a b c d",)]
    users = [CaptionedImage(scenes[0].image, r, f"{i}.png") for i, r in enumerate(refs)]
    perfect = ev.score(
        caption_examples(users), _outputs(["a red circle above a blue square", "a b c d"])
    )
    assert perfect == {"bleu": pytest.approx(100.0), "chrf": pytest.approx(100.0), "exact": 1.0}
    worse = ev.score(caption_examples(users), _outputs(["a red circle above a square", "x y"]))
    assert 0 < worse["bleu"] < 100 and worse["exact"] == 0.0
    with pytest.raises(ValueError, match=r"hypotheses: expected one per reference \(2\), got 1"):
        ev.score(caption_examples(users), _outputs(["x"]))
    # built-in scenes: their own captions are true; the attention check needs weights
    examples = caption_examples(scenes[:2], "test")
    assert [e.origin for e in examples] == ["test[0]", "test[1]"]
    texts = [s.captions[0] for s in scenes[:2]]
    assert ev.score(examples, _outputs(texts))["true_captions"] == 1.0
    scored = ev.score(examples, _outputs(texts, [torch.full((12, 16), 1 / 16)] * 2))
    assert list(scored) == ["bleu", "chrf", "exact", "true_captions", "attention_on_object"]


def test_attention_on_the_named_objects():
    objects = (
        SceneObject("circle", "red", "small", 12.0, 12.0, 3.0),  # in cell (1, 1)
        SceneObject("square", "blue", "large", 28.0, 28.0, 3.0),
    )  # in cell (3, 3)
    scene = Scene(objects, render(objects, 32), (), ())
    caption = "a small red circle left of a blue square"  # words 1-3 and 7-8 name objects
    weights = torch.full((10, 16), 0.01)  # (words + EOS, a 4 x 4 grid of 8 px cells)
    weights[:, 5] = 1.0  # every word looks at the red circle
    assert attention_on_objects(scene, caption, weights) == (3, 5)
    weights[7:9, 15] = 2.0  # "blue square" looks at the blue square
    assert attention_on_objects(scene, caption, weights) == (5, 5)
    weights[1:4, 0] = 3.0  # "small red circle" looks at an empty corner
    assert attention_on_objects(scene, caption, weights) == (2, 5)
    assert attention_on_objects(scene, "a green circle at the top", weights) == (0, 0)
    assert attention_on_objects(scene, "not a caption", weights) == (0, 0)
    metrics = scene_metrics(
        [scene, scene], [caption, "a red circle right of a blue square"], [weights, weights]
    )
    assert metrics == {"true_captions": 0.5, "attention_on_object": pytest.approx(3 / 9)}
    assert scene_metrics([scene], [caption], [None]) == {"true_captions": 1.0}
    assert scene_metrics([scene], [caption]) == {"true_captions": 1.0}
    with pytest.raises(
        ValueError,
        match=r"captions, weights: expected one per scene \(2\), "
        r"got 1 and none",
    ):
        scene_metrics([scene, scene], [caption])


def test_a_few_steps_lower_the_loss_and_evaluate_reports_everything(scenes, tmp_path, one_thread):
    task = CaptionTask(scenes, scenes[:3], model_config=MODEL, batch_size=8, doubly_stochastic=0.0)
    torch.manual_seed(0)
    model = task.build_model()
    before = task.loss(model.eval(), task.batches(0)[0])[0].item()
    Trainer(
        model,
        task,
        TrainConfig(
            max_steps=15,
            lr=2e-2,
            warmup_steps=0,
            eval_every=100,
            checkpoint_every=100,
            progress=False,
            metric="bleu",
        ),
        tmp_path,
    ).fit()
    after = task.loss(model.eval(), task.batches(0)[0])[0].item()
    assert after < before - 0.3
    metrics = task.evaluate(model)
    assert list(metrics) == ["bleu", "chrf", "exact", "true_captions", "attention_on_object"]
    evaluator = CaptionEvaluator(model, task.config(), task.vocab())
    captions = caption_images(
        model, task.words, [s.image for s in scenes[:3]], max_words=task.max_words, weights=True
    )
    result = score_examples(evaluator, caption_examples(scenes[:3], "valid"))
    assert result.metrics == metrics  # validation is the evaluator's score
    assert [o.texts for o in result.outputs] == [c.texts for c in captions]
    assert all(torch.equal(o.weights, c.weights) for o, c in zip(result.outputs, captions))
    captions = caption_images(
        model, task.words, [s.image for s in scenes[:2]], max_words=4, weights=True
    )
    assert all(len(c.texts[0].split()) <= 4 and c.weights.shape[1] == 64 for c in captions)
    beams = evaluator.decode([s.image for s in scenes[:2]], Decoding(beam=3, n_best=3))
    assert all(len(o.texts) == 3 for o in beams)


def test_config_and_vocab(scenes):
    task = CaptionTask(
        scenes, scenes[:2], model_config={**MODEL, "attention": "none"}, doubly_stochastic=0.0
    )
    config = task.config()
    assert config["task"] == "caption" and config["model"]["name"] == "captioner"
    assert config["model"]["vocab"] == len(task.words) and config["max_words"] > 8
    assert config["loss"]["doubly_stochastic"] == 0.0
    assert task.vocab()["type"] == "word"


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(doubly_stochastic=-1), "doubly_stochastic: expected a non-negative number, got -1"),
        (
            dict(entropy_weight=float("inf")),
            "entropy_weight: expected a non-negative number, got inf",
        ),
        (
            dict(doubly_stochastic=True),
            "doubly_stochastic: expected a non-negative number, got True",
        ),
        (dict(baseline_decay=1.0), r"baseline_decay: expected a probability in \[0, 1\), got 1.0"),
        (dict(batch_size=0), "batch_size: expected a positive int, got 0"),
    ],
)
def test_bad_settings(scenes, kw, match):
    with pytest.raises(ValueError, match=match):
        CaptionTask(scenes, scenes[:2], model_config=MODEL, **kw)


def test_images_of_another_size_or_without_captions_are_named(scenes):
    small = CaptionedImage(torch.zeros(3, 16, 16, dtype=torch.uint8), ("a b",), "x.png")
    with pytest.raises(
        DataError,
        match=r"valid\[1\]: expected a uint8 image \(3, 32, 32\) "
        r"\(the model's image_size\), got torch.uint8 "
        r"\(3, 16, 16\)",
    ):
        CaptionTask(scenes, [scenes[0], small], model_config=MODEL)
    empty = CaptionedImage(scenes[0].image, (), "y.png")
    with pytest.raises(DataError, match=r"train\[0\]: expected non-empty captions"):
        CaptionTask([empty], [], model_config=MODEL)


def test_pictures_of_validation_images(scenes, tmp_path):
    soft = CaptionTask(scenes, scenes[:3], model_config=MODEL)
    paths = soft.pictures(soft.build_model(), tmp_path, 2)
    assert [p.name for p in paths] == ["caption_0.png", "caption_1.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)
    none = CaptionTask(scenes, scenes[:3], model_config={**MODEL, "attention": "none"})
    assert none.pictures(none.build_model(), tmp_path / "none", 2) == []


def test_the_evaluator_reads_built_in_splits_and_the_users_folder(scenes, tmp_path):
    task = CaptionTask(
        scenes,
        scenes[:2],
        model_config=MODEL,
        data={"built_in": "scenes", "min_objects": 3, "max_objects": 4},
    )
    ev = CaptionEvaluator(task.build_model(), task.config(), task.vocab())
    held = ev.read("scenes:heldout")
    assert len(held) == SCORED_SCENES and held[0].origin == "heldout[0]"
    assert held[0].input.shape == (3, 32, 32) and held[0].reference == held[0].annotation.captions
    assert max(len(e.annotation.objects) for e in held) == 4  # as the checkpoint was trained
    assert torch.equal(
        ev.read("scenes:test")[5].input,
        generate_scenes(6, split="test", size=32, max_objects=4)[5].image,
    )
    with pytest.raises(
        DataError, match="scenes:train: expected built-in scenes scenes:test or scenes:heldout"
    ):
        ev.read("scenes:train")
    tsv = write_caption_folder(scenes[:2], tmp_path / "pics")
    for path in (tsv.parent, tsv):  # the folder or its TSV
        examples = ev.read(path)
        assert [e.origin for e in examples] == [
            str(tsv.parent / "000000.png"),
            str(tsv.parent / "000001.png"),
        ]
        assert examples[1].reference == scenes[1].captions and examples[1].annotation is None
    assert list(score_examples(ev, examples).metrics) == ["bleu", "chrf", "exact"]
