"""Built-in scenes: deterministic, held-out pairs only in the held-out split, every caption
true, every answer what the objects say, and a checker that refuses false captions."""

import numpy as np
import pytest
import torch

from attnkit.data import generate_scenes, question_set
from attnkit.data.worlds.scenes import (
    ANSWERS,
    COLOURS,
    HELD_OUT,
    QUESTION_TYPES,
    SceneObject,
    caption_is_true,
    captioned_images,
    object_masks,
    parse_caption,
    region_of,
)


@pytest.fixture(scope="module")
def scenes():
    return generate_scenes(60, seed=4)


@pytest.fixture(scope="module")
def heldout():
    return generate_scenes(40, split="heldout", seed=4)


def _pair(obj):
    return obj.colour, obj.shape


def test_same_arguments_same_scenes_and_splits_differ(scenes):
    again = generate_scenes(3, seed=4)
    for a, b in zip(scenes, again):
        assert a.objects == b.objects and a.captions == b.captions
        assert a.questions == b.questions and torch.equal(a.image, b.image)
    valid = generate_scenes(3, split="valid", seed=4)
    assert all(a.objects != b.objects for a, b in zip(again, valid))


def test_objects_are_different_kinds_inside_the_image_and_do_not_overlap(scenes):
    for scene in scenes:
        assert 3 <= len(scene.objects) <= 8
        kinds = [(o.shape, o.colour, o.size) for o in scene.objects]
        assert len(set(kinds)) == len(kinds)
        masks = object_masks(scene)  # (N, S, S)
        assert masks.shape == (len(scene.objects), 64, 64)
        assert masks.any((1, 2)).all() and masks.sum(0).max() == 1  # drawn, never overlapping
        for obj, mask in zip(scene.objects, masks):
            ys, xs = np.nonzero(mask)
            assert abs(xs.mean() - obj.x) < 2.5 and abs(ys.mean() - obj.y) < 2.5
            pixels = scene.image[:, ys, xs].T  # the object's colour where it is drawn
            assert (pixels == torch.tensor(COLOURS[obj.colour], dtype=torch.uint8)).all()


def test_held_out_pairs_only_in_the_held_out_split(scenes, heldout):
    assert not any(_pair(o) in HELD_OUT for s in scenes for o in s.objects)
    assert not any(
        f"{c} {s}" in text
        for scene in scenes
        for text in (*scene.captions, *(q.question for q in scene.questions))
        for c, s in HELD_OUT
    )
    for scene in heldout:
        focus = [o for o in scene.objects if _pair(o) in HELD_OUT]
        assert focus
        subject = parse_caption(scene.captions[0]).subject  # captions are about them
        assert (subject.colour, subject.shape) in HELD_OUT


def test_every_caption_is_true_and_of_the_grammar(scenes, heldout):
    for scene in [*scenes, *heldout]:
        assert len(scene.captions) == 5 and len(set(scene.captions)) == 5
        for caption in scene.captions:
            assert parse_caption(caption) is not None
            assert caption_is_true(scene.objects, caption, size=scene.size)


def test_checker_refuses_false_and_ungrammatical_captions():
    a = SceneObject("circle", "red", "small", 10.0, 50.0, 4.0)
    b = SceneObject("square", "blue", "large", 40.0, 20.0, 7.0)
    objects = [a, b]
    assert caption_is_true(objects, "a small red circle left of a blue square", size=64)
    assert caption_is_true(objects, "a blue square above a small red circle", size=64)
    for false in (
        "a large red circle left of a blue square",  # wrong size
        "a red square left of a blue square",  # no red square
        "a red circle right of a blue square",
        "a red circle above a blue square",
        "a red circle left of a red circle",  # needs two different objects
        "a red circle at the top left",
        "a blue square at the centre",
    ):
        assert not caption_is_true(objects, false, size=64), false
    assert caption_is_true(objects, "a red circle at the bottom left", size=64)
    for bad in (
        "",
        "red circle left of a blue square",
        "a red circle left of",
        "a red circle left of a blue square now",
        "a red circle at the middle",
    ):
        assert parse_caption(bad) is None and not caption_is_true(objects, bad, size=64)


def test_answers_follow_from_the_objects(scenes):
    seen = set()
    for scene in scenes:
        objs = scene.objects
        for q in scene.questions:
            seen.add(q.type)
            assert q.answer in ANSWERS and q.question.endswith(" ?")
            words = q.question.split()
            if q.type == "count":
                noun = words[2]
                n = sum(o.shape + "s" == noun or o.colour == noun for o in objs)
                assert q.answer == str(n)
            elif q.type == "exist":
                colour, shape = words[-3], words[-2]
                assert q.answer == ("yes" if (colour, shape) in map(_pair, objs) else "no")
            elif q.type == "where":
                named = _named(objs, words[2 : words.index("in")])
                assert q.answer == region_of(named, scene.size)
            elif q.type in ("colour", "shape", "size"):
                named = _named(objs, words[3:-1])
                assert q.answer == getattr(named, q.type)
            elif q.type in ("closest", "farthest"):
                subject = _named(objs, words[7:-1])  # after "the object closest to"
                dist = {
                    o: np.hypot(o.x - subject.x, o.y - subject.y) for o in objs if o is not subject
                }
                pick = (min if q.type == "closest" else max)(dist, key=dist.get)
                assert q.answer == getattr(pick, words[1])
            else:  # is A left of B ? / is A above B ?
                word, axis = ("left", "x") if q.type == "left_of" else ("above", "y")
                i = words.index(word)
                a = _named(objs, words[1:i])
                b = _named(objs, words[i + (2 if word == "left" else 1) : -1])
                assert q.answer == ("yes" if getattr(a, axis) < getattr(b, axis) else "no")
    assert seen == set(QUESTION_TYPES)


def _named(objects, phrase):
    """The one object ``the [size] [colour] shape|object`` names."""
    words = phrase[1:] if phrase[0] == "the" else phrase
    hits = [o for o in objects if all(w in (o.size, o.colour, o.shape, "object") for w in words)]
    assert len(hits) == 1, phrase
    return hits[0]


def test_yes_no_answers_are_balanced(scenes):
    more = generate_scenes(200, seed=5)
    for kind in ("exist", "left_of", "above"):
        answers = [q.answer for s in more for q in s.questions if q.type == kind]
        assert 0.35 < answers.count("yes") / len(answers) < 0.65, kind


def test_scenes_as_captioned_images_and_question_sets(scenes):
    items = captioned_images(scenes[:2], "train")
    assert items[1].captions == scenes[1].captions and items[1].origin == "train[1]"
    images, questions = question_set(scenes[:2], "valid")
    assert len(images) == 2 and images[1] is scenes[1].image
    assert [q.image for q in questions] == [0] * len(scenes[0].questions) + [1] * len(
        scenes[1].questions
    )
    assert questions[0].origin == "valid[0].0" and questions[0].type == "exist"


def test_other_sizes_and_object_counts():
    scene = generate_scenes(1, size=128, min_objects=8, max_objects=8, captions=2)[0]
    assert scene.image.shape == (3, 128, 128) and len(scene.objects) == 8
    assert len(scene.captions) == 2


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(split="dev"), "split: expected one of train, valid, test, heldout, got 'dev'"),
        (dict(n=-1), "n: expected a non-negative int, got -1"),
        (dict(size=16), r"size: expected an int in \[32, 256\] \(pixels\), got 16"),
        (
            dict(min_objects=5, max_objects=4),
            "min_objects, max_objects: expected 2 <= .* got 5 and 4",
        ),
        (dict(max_objects=9), "got 3 and 9"),
        (dict(captions=0), "captions: expected a positive int, got 0"),
    ],
)
def test_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        generate_scenes(**{"n": 1, **kw})
