"""``attnkit serve`` against hostile inputs (issue 57's third probe): real servers on free
localhost ports and real HTTP requests, as in ``test_serve.py``."""

import httpx
import numpy as np
import pytest
from PIL import Image

from attnkit.serve import Limits
from attnkit.tasks.loading import load_evaluator
from tests.cli.conftest import float_wav_bytes, tiny_vqa  # noqa: F401 (a fixture)
from tests.serve.test_serve import serving


@pytest.fixture(scope="module")
def transcribe_url():
    with serving(load_evaluator("builtin:asr-digits"), Limits(max_seconds=2)) as url:
        yield url


@pytest.mark.parametrize("beam", [1, 5])
def test_audio_of_huge_finite_samples_is_a_422_naming_the_largest(transcribe_url, beam):
    # it was 200 with "" greedy and 500 at beam 5 (the features overflowed)
    samples = [0.01] * 1600
    samples[100] = -1e30
    r = httpx.post(
        f"{transcribe_url}/transcribe",
        timeout=60,
        files={"audio": ("loud.wav", float_wav_bytes(samples, 16000), "audio/wav")},
        data={"decoding": f'{{"beam": {beam}}}'},
    )
    assert r.status_code == 422 and r.json()["field"] == "audio", r.text
    assert (
        "1 samples have a magnitude above 1000 (the largest -1e+30 at frame 100)"
        in r.json()["error"]
    )


@pytest.fixture(scope="module")
def translate_url():
    with serving(
        load_evaluator("builtin:translate-dates"), Limits(max_beam=8, max_body_bytes=20 << 20)
    ) as url:
        yield url


@pytest.mark.parametrize(
    "options, field",
    [
        # finite, but past float32 once applied: "2001-03-33" for "2001-03-03", 200
        ({"beam": 5, "length_penalty": 100}, "decoding.length_penalty"),
        ({"beam": 5, "coverage_penalty": 1e38}, "decoding.coverage_penalty"),
    ],
)
def test_penalties_that_overflow_are_a_422(translate_url, options, field):
    r = httpx.post(
        f"{translate_url}/translate", json={"text": "<en> 3 March 2001", "decoding": options}
    )
    assert r.status_code == 422 and r.json()["field"] == field, r.text
    assert r.json()["error"].startswith(f"{field}: expected a number in [0, 10")


@pytest.mark.parametrize(
    "body, field",
    [
        ({"text": "<en> 3 March 2001", "extra": "x" * (8 << 20)}, "extra"),
        ({"text": "<en> 3 March 2001", "extra": ["x" * 1000] * 8000}, "extra"),
        ({"text": "<en> 3 March 2001", "decoding": {"beams": "x" * (8 << 20)}}, "decoding.beams"),
        ({"text": " " * (8 << 20)}, "text"),
    ],
)
def test_a_422_quotes_at_most_a_short_part_of_what_was_sent(translate_url, body, field):
    # an 8 MiB request got a 12.6 MB error: the unknown field's value echoed whole
    r = httpx.post(f"{translate_url}/translate", json=body, timeout=60)
    assert r.status_code == 422 and r.json()["field"] == field, r.text[:300]
    assert len(r.content) < 1000, r.text[:300]


def test_ask_refuses_an_image_past_max_pixels_as_caption_does(tiny_vqa, tmp_path):  # noqa: F811
    # /ask decoded any image the global limit allowed, whatever --max-pixels said
    picture = tmp_path / "p.png"
    Image.fromarray(np.zeros((40, 50, 3), np.uint8)).save(picture)
    with serving(load_evaluator(tiny_vqa), Limits(max_pixels=1000)) as url:
        r = httpx.post(
            f"{url}/ask",
            files={"image": ("p.png", picture.read_bytes())},
            data={"question": "what"},
        )
    assert r.status_code == 422 and r.json()["field"] == "image", r.text
    assert r.json()["error"] == (
        "image: expected at most 1,000 pixels (the server's "
        "--max-pixels), got 50 x 40 = 2,000 in p.png"
    )


@pytest.mark.parametrize(
    "options, field, expected",
    [
        ({"sample": 2, "temperature": 1e-300}, "decoding.temperature", "a number in [0.001, 1000]"),
        ({"sample": 2, "temperature": 1e300}, "decoding.temperature", "a number in [0.001, 1000]"),
        ({"sample": 2, "seed": 2**63}, "decoding.seed", "None or an int in [0, 2**63 - 1]"),
    ],
)
def test_sampling_options_that_overflow_are_a_422(translate_url, options, field, expected):
    # each was a 500
    r = httpx.post(
        f"{translate_url}/translate", json={"text": "<en> 3 March 2001", "decoding": options}
    )
    assert r.status_code == 422 and r.json()["field"] == field, r.text
    assert r.json()["error"].startswith(f"{field}: expected {expected}, got ")


@pytest.mark.parametrize(
    "body, kind",
    [
        (b"abc", "multipart/form-data"),  # no boundary
        (
            b"--x\r\nContent-Disposition: form-data\r\n\r\nabc\r\n--x--\r\n",
            "multipart/form-data; boundary=x",
        ),  # a part without a name
    ],
)
def test_a_malformed_upload_is_a_400_naming_body(transcribe_url, body, kind):
    # they were 400 with field null, where the docs say body
    r = httpx.post(f"{transcribe_url}/transcribe", content=body, headers={"content-type": kind})
    assert r.status_code == 400 and r.json()["field"] == "body", r.text
    assert r.json()["error"].startswith(
        "body: expected a multipart/form-data body, got malformed data ("
    ), r.text
