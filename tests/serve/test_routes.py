"""A task's endpoint is built from the route its evaluator declares
(:mod:`attnkit.tasks.route`): a task registered here, with no code of its own in
``attnkit.serve``, is served at its path with its fields, limits and refusals; the CTC check
that OCR declares is held; real servers and requests as in ``test_serve.py``."""

import io

import httpx
import pytest
from PIL import Image

from attnkit.errors import DataError
from attnkit.serve import Limits, create_app
from attnkit.tasks.evaluator import EVALUATORS, Evaluator, Output
from attnkit.tasks.loading import load_evaluator
from attnkit.tasks.route import Route, Text, Upload
from tests.serve.test_serve import serving


def _no_shout(evaluator, text: str) -> None:
    if text.isupper():
        raise DataError(f"a shouted text ({text!r}); expected lower case")


class EchoEvaluator(Evaluator):
    """Answers a text with itself reversed, best first, and then as it came (not registered
    by the class statement: :func:`echo_task` registers it for a test and removes it)."""

    data, metrics = "nothing", ()
    route = Route("/echo", "echo a text", texts=(Text("words", "what to echo", _no_shout),))
    decoded: list = []

    def read(self, path, **options):
        raise DataError(f"{path}: an echo has no data")

    def decode(self, inputs, decoding=None, *, weights=False):
        self.decoded.append((list(inputs), decoding))
        return [Output([x[::-1], x], lambda *a, **k: None, scores=[-1.0, -2.0]) for x in inputs]


class SizeEvaluator(EchoEvaluator):
    """Answers an uploaded image and a label with the image's size."""

    route = Route(
        "/size",
        "measure an image",
        upload=Upload("picture"),
        texts=(Text("label"),),
        no_decoding="a size is measured, not decoded",
        read=lambda ev, given, *, max_seconds: (Image.open(given["picture"]).size, given["label"]),
    )

    def decode(self, inputs, decoding=None, *, weights=False):
        return [Output([f"{label}: {w} x {h}"], lambda *a, **k: None) for (w, h), label in inputs]


@pytest.fixture
def registered():
    """Register the test tasks as a task module does, and remove them after."""
    for name, cls in (("echo-test", EchoEvaluator), ("size-test", SizeEvaluator)):
        cls.task = name
        EVALUATORS[name] = cls
    yield
    for name in ("echo-test", "size-test"):
        EVALUATORS.pop(name)


def test_a_task_is_served_at_the_route_it_declares(registered):
    echo = EchoEvaluator(None, {}, None)
    with serving(echo, Limits(max_chars=10, max_beam=4)) as url:
        r = httpx.post(f"{url}/echo", json={"words": "abc", "decoding": {"beam": 3}})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["task"] == "echo-test" and body["text"] == "cba"
        assert [o["text"] for o in body["outputs"]] == ["cba", "abc"]
        assert echo.decoded[-1][0] == ["abc"] and echo.decoded[-1][1].beam == 3
        assert httpx.get(f"{url}/health").json()["endpoint"] == "/echo"
        refusals = [
            ({"words": "x" * 11}, "words", "words: expected at most 10 characters"),
            ({"words": "LOUD"}, "words", "words: a shouted text ('LOUD'); expected lower case"),
            (
                {"words": "abc", "text": "abc"},
                "text",
                "text: not an option; expected one of words, decoding, got 'abc'",
            ),
            (
                {"words": "abc", "decoding": {"beam": 5}},
                "decoding.beam",
                "decoding.beam: expected at most 4 (the server's --max-beam), got 5",
            ),
            ({}, "words", "words: missing"),
        ]
        for body, field, message in refusals:
            r = httpx.post(f"{url}/echo", json=body)
            assert (r.status_code, r.json()["field"]) == (422, field), (body, r.text)
            assert r.json()["error"].startswith(message), (body, r.text)
        assert httpx.post(f"{url}/translate", json={"text": "abc"}).status_code == 404
        schema = httpx.get(f"{url}/openapi.json").json()
        assert "Echo-testRequest" in schema["components"]["schemas"]


def test_an_upload_route_reads_its_fields_in_order_within_the_limits(registered):
    picture = io.BytesIO()
    Image.new("RGB", (20, 10)).save(picture, format="PNG")
    with serving(SizeEvaluator(None, {}, None), Limits(max_pixels=100)) as url:

        def post(data, size=(20, 5)):
            image = io.BytesIO()
            Image.new("RGB", size).save(image, format="PNG")
            return httpx.post(
                f"{url}/size",
                data=data,
                files={"picture": ("p.png", image.getvalue(), "image/png")},
            )

        r = post({"label": "it"})
        assert r.status_code == 200 and r.json()["text"] == "it: 20 x 5", r.text
        for data, size, field, message in [
            (
                {"label": "it", "decoding": '{"beam": 2}'},
                (20, 5),
                "decoding",
                "decoding: a size is measured, not decoded; expected no decoding options",
            ),
            ({"label": " "}, (20, 5), "label", "label: expected a non-empty text"),
            ({"label": "it"}, (20, 10), "picture", "picture: expected at most 100 pixels"),
            ({}, (20, 5), "label", "label: missing"),
        ]:
            r = post(data, size)
            assert (r.status_code, r.json()["field"]) == (422, field), (data, r.text)
            assert r.json()["error"].startswith(message), (data, r.text)
        r = httpx.post(f"{url}/size", json={"label": "it"})
        assert r.status_code == 415 and "multipart/form-data" in r.json()["error"]


def test_an_evaluator_without_a_route_is_not_served():
    class Unserved(EchoEvaluator):
        route = None

    Unserved.task = "unserved"
    with pytest.raises(
        ValueError,
        match=r"^task: expected one of asr, caption, ocr, "
        r"translate, vqa, got 'unserved'$",
    ):
        create_app(Unserved(None, {}, None))


def test_a_ctc_head_refuses_beam_search_and_max_len_before_reading():
    reader = load_evaluator("builtin:ocr-lines")
    assert reader.model.head_kind == "ctc"
    image = io.BytesIO()
    Image.new("L", (120, 32), 255).save(image, format="PNG")
    with serving(reader) as url:

        def read(decoding):
            return httpx.post(
                f"{url}/read",
                data={"decoding": decoding},
                timeout=60,
                files={"image": ("line.png", image.getvalue(), "image/png")},
            )

        assert read("{}").status_code == 200
        assert read('{"beam": 2}').status_code == 200  # CTC prefix beam search
        for decoding, field, message in [
            (
                '{"coverage_penalty": 2}',
                "decoding.coverage_penalty",
                "decoding.coverage_penalty: a CTC head reads the best path or a prefix beam",
            ),
            (
                '{"max_len": 5}',
                "decoding.max_len",
                "decoding.max_len: a CTC head reads the best path or a prefix beam",
            ),
        ]:
            r = read(decoding)
            assert (r.status_code, r.json()["field"]) == (422, field), r.text
            assert r.json()["error"].startswith(message), r.text
