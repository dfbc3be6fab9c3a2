"""VqaTask: batches of questions with their images, the answer loss, accuracy per question
type, answering, and the data it refuses; the evaluator reads built-in scenes and the user's
folders and scores what validation scores."""

import math

import pytest
import torch
import torch.nn.functional as F

from attnkit.data import (
    DataError,
    ImageQuestion,
    generate_scenes,
    question_set,
    write_question_folder,
)
from attnkit.data.worlds.scenes import ANSWERS
from attnkit.decoding import Decoding
from attnkit.tasks.evaluator import score_examples
from attnkit.tasks.vqa import (
    VqaEvaluator,
    VqaTask,
    answer_questions,
    question_examples,
    vqa_metrics,
)
from attnkit.train import TrainConfig, Trainer

MODEL = dict(image_size=32, channels=(4, 8), emb=8, hidden=8, attn_dim=8)


@pytest.fixture(scope="module")
def data():
    scenes = generate_scenes(10, seed=3, size=32, max_objects=4)
    return question_set(scenes[:8], "train"), question_set(scenes[8:], "valid")


def test_batches_pair_each_question_with_its_image_and_answer(data):
    """Each batch holds the questions about whole images (every image once), each question
    paired through ``image_index`` with its image and with its answer; the loss is the
    cross-entropy of the answers, the same as with one image per question."""
    train, valid = data
    task = VqaTask(train, valid, model_config=MODEL, answers=ANSWERS, batch_size=5)
    batches = task.batches(0)
    assert sorted(len(b["answers"]) for b in batches)[1] >= 5  # all but the last: 5 or more
    assert sum(len(b["answers"]) for b in batches) == len(train[1])
    by_text = {}
    for q in train[1]:
        by_text.setdefault(q.question, []).append(q)
    seen_images = []
    for batch in batches:
        images = batch["images"]
        assert len({bytes(i.numpy()) for i in images}) == len(images)  # each image once
        for j, row in enumerate(batch["questions"]):
            text = task.words.decode(row[: int(batch["lengths"][j])])
            image = images[int(batch["image_index"][j])]
            assert any(
                torch.equal(image, train[0][q.image].float() / 255)
                and task.answers[int(batch["answers"][j])] == q.answer
                for q in by_text[text]
            ), text
        seen_images.append(len(images))
    assert sum(seen_images) == len(train[0])  # every image in one batch only
    batch = batches[0]
    torch.manual_seed(0)
    model = task.build_model().eval()  # batch norm: the same statistics both ways
    loss, n = task.loss(model, batch)
    out = model(batch["images"][batch["image_index"]], batch["questions"], batch["lengths"])
    torch.testing.assert_close(loss, F.cross_entropy(out.logits, batch["answers"]))
    assert n == len(batch["answers"]) and task.model_config["answers"] == len(ANSWERS)


def test_vqa_metrics_per_type_and_relational():
    metrics = vqa_metrics(
        ["yes", "2", "red", "no"],
        ["yes", "3", "red", "yes"],
        ["exist", "count", "closest", "left_of"],
    )
    assert metrics == {
        "accuracy": 0.5,
        "accuracy_closest": 1.0,
        "accuracy_count": 0.0,
        "accuracy_exist": 1.0,
        "accuracy_left_of": 0.0,
        "accuracy_relational": 0.5,
        "accuracy_non_relational": 0.5,
    }
    assert vqa_metrics(["a"], ["a"], ["user"]) == {"accuracy": 1.0, "accuracy_user": 1.0}
    with pytest.raises(
        ValueError,
        match="predicted, answers, types: expected one each per question, got 1, 2 and 2",
    ):
        vqa_metrics(["a"], ["a", "b"], ["x", "y"])


def test_training_fits_the_questions_and_evaluate_reports_every_type(data, tmp_path, one_thread):
    train, valid = data
    task = VqaTask(train, valid, model_config=MODEL, batch_size=100)  # one batch: them all
    torch.manual_seed(0)
    model = task.build_model()
    batch = task.batches(0)[0]
    before = task.loss(model.eval(), batch)[0].item()
    Trainer(
        model,
        task,
        TrainConfig(
            max_steps=20,
            lr=1e-2,
            warmup_steps=0,
            eval_every=100,
            schedule="constant",
            checkpoint_every=100,
            progress=False,
        ),
        tmp_path,
    ).fit()
    assert task.loss(model.eval(), batch)[0].item() < before - 0.5
    metrics = task.evaluate(model)
    types = {q.type for q in valid[1]}
    assert {f"accuracy_{t}" for t in types} | {
        "accuracy",
        "accuracy_relational",
        "accuracy_non_relational",
    } == set(metrics)
    evaluator = VqaEvaluator(model, task.config(), task.vocab())
    result = score_examples(evaluator, question_examples(*valid))
    assert result.metrics == metrics  # validation is the evaluator's score
    asked = [(valid[0][q.image], q.question) for q in valid[1]]
    shared = answer_questions(model, task.words, task.answers, asked, batch_size=7)
    assert [o.text for o in result.outputs] == [a.answer for a in shared]
    alone = answer_questions(
        model,
        task.words,
        task.answers,  # every image a distinct tensor
        [(image.clone(), q) for image, q in asked],
        batch_size=7,
    )
    for a, b in zip(shared, alone, strict=True):
        assert a.answer == b.answer and math.isclose(a.probability, b.probability, rel_tol=1e-5)
        assert torch.allclose(a.weights, b.weights, atol=1e-6)
    assert result.metrics == vqa_metrics(
        [o.text for o in result.outputs], [q.answer for q in valid[1]], [q.type for q in valid[1]]
    )
    found = answer_questions(
        model, task.words, task.answers, [(valid[0][0], "Does the image contain a purple dog?")]
    )
    assert found[0].answer in task.answers and 0 < found[0].probability <= 1
    assert found[0].weights.shape == (2, 64)
    with pytest.raises(ValueError, match=r"asked\[0\]: expected a question with words, got ' '"):
        answer_questions(model, task.words, task.answers, [(valid[0][0], " ")])


def test_config_and_vocab(data):
    task = VqaTask(*data, model_config={**MODEL, "kind": "none"})
    config = task.config()
    assert config["task"] == "vqa" and config["model"]["name"] == "vqa"
    assert config["model"]["kind"] == "none"
    vocab = task.vocab()
    assert vocab["words"]["type"] == "word" and vocab["answers"] == task.answers
    assert task.answers == sorted({q.answer for q in data[0][1]})


def test_bad_data_is_named(data):
    train, valid = data
    stray = ImageQuestion(5, "what ?", "x", "user", "q.tsv:3")
    with pytest.raises(DataError, match=r"q.tsv:3: image 5 is not one of the 2 valid images"):
        VqaTask(train, (valid[0], [stray]), model_config=MODEL)
    with pytest.raises(DataError, match=r"train: answers outside the model's answers: \['yes'\]"):
        VqaTask(train, valid, model_config=MODEL, answers=[a for a in ANSWERS if a != "yes"])
    small = [torch.zeros(3, 16, 16, dtype=torch.uint8)]
    with pytest.raises(DataError, match=r"train image 0: expected a uint8 image \(3, 32, 32\)"):
        VqaTask((small, train[1][:1]), valid, model_config=MODEL)
    with pytest.raises(ValueError, match="train: expected at least one question"):
        VqaTask((train[0], []), valid, model_config=MODEL)


def test_pictures_of_validation_questions(data, tmp_path):
    san = VqaTask(*data, model_config=MODEL)
    paths = san.pictures(san.build_model(), tmp_path, 3)
    assert [p.name for p in paths] == ["answer_0.png", "answer_1.png", "answer_2.png"]
    none = VqaTask(*data, model_config={**MODEL, "kind": "none"})
    assert none.pictures(none.build_model(), tmp_path / "none", 3) == []


def test_the_evaluator_reads_built_in_splits_and_the_users_folder(data, tmp_path):
    task = VqaTask(*data, model_config=MODEL, answers=ANSWERS)
    ev = VqaEvaluator(task.build_model(), task.config(), task.vocab())
    held = ev.read("scenes:heldout")
    scenes = generate_scenes(2, split="heldout", size=32)
    first = [q for q in question_set(scenes, "heldout")[1] if q.image == 0]
    assert [(e.input[1], e.reference, e.annotation, e.origin) for e in held[: len(first)]] == [
        (q.question, q.answer, q.type, q.origin) for q in first
    ]
    assert torch.equal(held[0].input[0], scenes[0].image)
    with pytest.raises(DataError, match="scenes:valid: expected built-in scenes"):
        ev.read("scenes:valid")
    tsv = write_question_folder(*data[1], tmp_path / "qs")
    for path in (tsv.parent, tsv):
        examples = ev.read(path)
        assert [e.origin for e in examples] == [f"{tsv}:{n + 1}" for n in range(len(data[1][1]))]
        assert {e.annotation for e in examples} == {"user"}
    result = score_examples(ev, examples)
    assert list(result.metrics) == ["accuracy", "accuracy_user"]
    assert ev.label("accuracy_user") == "accuracy, user" and ev.label("accuracy") == "accuracy"
    answers = ev.answer([e.input for e in examples[:2]])
    assert [a.answer for a in answers] == [o.text for o in result.outputs[:2]]
    assert math.isclose(sum(answers[0].weights[0].tolist()), 1.0, rel_tol=1e-5)
    with pytest.raises(
        ValueError,
        match="decoding: a VQA model answers with its most probable "
        "class; decoding options do not apply, got beam=3",
    ):
        ev.decode([examples[0].input], Decoding(beam=3))
