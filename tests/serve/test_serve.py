"""``attnkit serve``: real servers on free localhost ports (uvicorn in a thread, and the command
in a subprocess), real HTTP requests (httpx): every task's endpoint against its evaluator,
concurrent requests equal to sequential ones, every limit, bad input, a model that raises,
the API key, the metrics and the schema, SIGTERM while requests are in flight."""

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx
import numpy as np
import pytest
import torch
import uvicorn
from PIL import Image

from attnkit.data import generate_lines, write_wav
from attnkit.decoding import Decoding
from attnkit.serve import Limits, create_app
from attnkit.serve.server import server_config
from attnkit.tasks.loading import load_evaluator
from tests.cli.conftest import tiny_captioner, tiny_vqa  # noqa: F401 (fixtures)

TEXTS = [
    "<en> 3 March 2001",
    "<de> 12. Mai 1999",
    "<en> 1 January 1970",
    "<fr> 5 juin 2010",
    "<en> 31 December 1999",
    "<en> 7 July 1977",
    "<de> 1. April 2020",
    "<en> 9 May 1945",
]


class Proxy:
    """An evaluator that behaves as ``inner``, except that decoding a text holding ``boom``
    raises, and every decoding first sleeps ``delay`` seconds."""

    def __init__(self, inner, delay: float = 0.0):
        self.inner, self.delay = inner, delay

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def decode(self, inputs, decoding=None, **kwargs):
        time.sleep(self.delay)
        if any(isinstance(x, str) and "boom" in x for x in inputs):
            raise RuntimeError("the model broke")
        return self.inner.decode(inputs, decoding, **kwargs)


@contextmanager
def serving(evaluator, limits=None, **kwargs):
    """The base URL of ``create_app(evaluator, limits)`` served by uvicorn in a thread on a
    socket bound to a free localhost port."""
    app = create_app(evaluator, limits or Limits(), **kwargs)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(server_config(app, limits, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(20)
        sock.close()


def concurrently(calls):
    """Run the zero-argument ``calls`` at once, each in a thread; their results in order."""
    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(lambda call: call(), calls))


@pytest.fixture(scope="module")
def translator():
    return load_evaluator("builtin:translate-dates")


@pytest.fixture(scope="module")
def translate_url(translator):
    with serving(
        Proxy(translator),
        Limits(max_wait_ms=100, max_batch=8, max_beam=8, max_chars=100, max_body_bytes=4096),
        name="builtin:translate-dates",
    ) as url:
        yield url


def test_translate_answers_as_the_evaluator_decodes(translator, translate_url):
    r = httpx.post(
        f"{translate_url}/translate",
        json={"text": TEXTS[0], "decoding": {"beam": 4, "n_best": 3}},
        headers={"X-Request-ID": "my-id.1"},
    )
    assert r.status_code == 200 and r.headers["x-request-id"] == "my-id.1"
    body = r.json()
    alone = translator.decode([TEXTS[0]], Decoding(beam=4, n_best=3))[0]
    assert [o["text"] for o in body["outputs"]] == alone.texts and body["text"] == alone.text
    assert [o["score"] for o in body["outputs"]] == pytest.approx(alone.scores, abs=1e-5)
    for output, tokens in zip(body["outputs"], alone.tokens, strict=True):
        assert [t["token"] for t in output["tokens"]] == [piece for piece, _ in tokens]
        assert [t["log_prob"] for t in output["tokens"]] == pytest.approx(
            [logp for _, logp in tokens], abs=1e-5
        )
    assert body["decoding"]["beam"] == 4 and body["decoding"]["n_best"] == 3
    assert body["id"] == "my-id.1" and body["task"] == "translate" and body["time_ms"] > 0
    default = httpx.post(f"{translate_url}/translate", json={"text": TEXTS[0]}).json()
    assert default["decoding"]["beam"] == 5  # the command line's default for translate


def test_concurrent_requests_are_decoded_together_and_equal_sequential_ones(translate_url):
    def ask(text, options):
        r = httpx.post(
            f"{translate_url}/translate", json={"text": text, "decoding": options}, timeout=30
        )
        assert r.status_code == 200, r.text
        return r.json()

    for options in ({"beam": 3, "n_best": 2}, {"beam": 1}, {"beam": 4, "beam_stop": "best"}):
        sequential = [ask(text, options) for text in TEXTS]
        together = concurrently([lambda t=text, o=options: ask(t, o) for text in TEXTS])
        assert max(r["batch_size"] for r in together) > 1
        assert all(r["batch_size"] == 1 for r in sequential)
        for one, other in zip(sequential, together):
            assert [o["text"] for o in one["outputs"]] == [o["text"] for o in other["outputs"]]
            assert [o["score"] for o in one["outputs"]] == pytest.approx(
                [o["score"] for o in other["outputs"]], abs=1e-4
            )


def test_samples_with_a_seed_are_those_of_decoding_alone(translator, translate_url):
    options = {"sample": 3, "seed": 7, "temperature": 1.5}
    answers = concurrently(
        [
            lambda: httpx.post(
                f"{translate_url}/translate",
                timeout=30,
                json={"text": TEXTS[1], "decoding": options},
            )
            for _ in range(3)
        ]
    )
    alone = translator.decode(
        [TEXTS[1]], Decoding(sample=True, samples=3, seed=7, temperature=1.5)
    )[0]
    assert all([o["text"] for o in r.json()["outputs"]] == alone.texts for r in answers)


BAD = [  # (what is sent, status, field named)
    (
        {"content": b'{"text": "<en> 1 May 2001"', "headers": {"content-type": "application/json"}},
        400,
        "body",
    ),
    (
        {"content": b"<en> 1 May 2001", "headers": {"content-type": "text/plain"}},
        415,
        "Content-Type",
    ),
    ({"json": {"text": "   "}}, 422, "text"),
    ({"json": {"text": "<en> " + "9" * 200}}, 422, "text"),
    ({"json": {"decoding": {"beam": 2}}}, 422, "text"),
    ({"json": {"text": 12}}, 422, "text"),
    ({"json": ["<en> 1 May 2001"]}, 422, "body"),
    ({"json": {"text": "<en> 1 May 2001", "decoding": {"beams": 2}}}, 422, "decoding.beams"),
    ({"json": {"text": "<en> 1 May 2001", "decoding": {"beam": 9}}}, 422, "decoding.beam"),
    (
        {"json": {"text": "<en> 1 May 2001", "decoding": {"beam": 2, "n_best": 3}}},
        422,
        "decoding.n_best",
    ),
    ({"json": {"text": "<en> 1 May 2001", "decoding": {"top_k": 3}}}, 422, "decoding.top_k"),
    (
        {"json": {"text": "<en> 1 May 2001", "decoding": {"beam_stop": "first"}}},
        422,
        "decoding.beam_stop",
    ),
    (
        {"json": {"text": "<en> 1 May 2001", "decoding": {"sample": 2, "beam_stop": "best"}}},
        422,
        "decoding.beam_stop",
    ),
    ({"json": {"text": "<en> 1 May 2001", "decoding": {"max_len": 5000}}}, 422, "decoding.max_len"),
    (
        {"json": {"text": "<en> 1 May 2001", "decoding": {"temperature": -1, "sample": 2}}},
        422,
        "decoding.temperature",
    ),
    ({"json": {"text": "<en> 1 May 2001", "extra": 1}}, 422, "extra"),
    ({"json": {"text": "<en> " + "1" * 5000}}, 413, "body"),
    (
        {
            "content": (b"x" * 1000 for _ in range(10)),  # chunked: no Content-Length
            "headers": {"content-type": "application/json"},
        },
        413,
        "body",
    ),
]


@pytest.mark.parametrize(
    "sent, status, field", BAD, ids=[f"{s}-{f}-{i}" for i, (_, s, f) in enumerate(BAD)]
)
def test_bad_input_gets_a_4xx_naming_the_field_and_the_server_keeps_serving(
    translate_url, sent, status, field
):
    r = httpx.post(f"{translate_url}/translate", **sent)
    assert r.status_code == status, r.text
    error = r.json()
    assert error["field"] == field and error["error"].startswith(field.split(".")[0])
    assert error["request_id"] == r.headers["x-request-id"]
    good = httpx.post(
        f"{translate_url}/translate", json={"text": TEXTS[0], "decoding": {"beam": 1}}
    )
    assert good.status_code == 200 and good.json()["text"]


def test_a_model_that_raises_fails_that_request_alone_logged_with_its_id(translate_url, caplog):
    calls = [
        lambda t=text: httpx.post(
            f"{translate_url}/translate", timeout=30, json={"text": t, "decoding": {"beam": 1}}
        )
        for text in ["<en> boom", *TEXTS[:3]]
    ]
    with caplog.at_level(logging.ERROR, logger="attnkit.serve"):
        boom, *good = concurrently(calls)
    assert [r.status_code for r in good] == [200] * 3
    assert boom.status_code == 500
    request_id = boom.json()["request_id"]
    assert request_id in boom.json()["error"]
    assert any(request_id in r.getMessage() and r.exc_info for r in caplog.records)


def test_health_metrics_and_schema(translate_url):
    health = httpx.get(f"{translate_url}/health").json()
    assert health["task"] == "translate" and health["endpoint"] == "/translate"
    assert health["checkpoint"] == "builtin:translate-dates" and health["runtime"] == "pytorch"
    httpx.post(f"{translate_url}/translate", json={"text": TEXTS[2]})
    # a refusal of its own: the server is shared, and another test's may run elsewhere
    assert httpx.post(f"{translate_url}/translate", json={"txt": "x"}).status_code == 422
    metrics = httpx.get(f"{translate_url}/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    text = metrics.text
    for pattern in (
        r'attnkit_requests_total\{endpoint="/translate",status="200"\} \d+',
        r'attnkit_request_errors_total\{endpoint="/translate",status="422"\} \d+',
        r"attnkit_queue_depth 0",
        r'attnkit_batch_size_bucket\{le="\+Inf"\} \d+',
        r"attnkit_batch_size_count \d+",
        r'attnkit_request_duration_seconds_bucket\{endpoint="/translate",'
        r'le="0.5"\} \d+',
        r'attnkit_request_duration_seconds_count\{endpoint="/translate"\} \d+',
    ):
        assert re.search(pattern, text), pattern
    schema = httpx.get(f"{translate_url}/openapi.json").json()
    assert {"/translate", "/health", "/metrics"} <= set(schema["paths"])
    assert "DecodingOptions" in schema["components"]["schemas"]
    assert httpx.get(f"{translate_url}/docs").status_code == 200


class Gated(Proxy):
    """An evaluator whose decoding says when it has started and then waits to be released, so
    a test knows what is being decoded and what waits, whatever the machine's speed."""

    def __init__(self, inner):
        super().__init__(inner)
        self.started, self.release = threading.Event(), threading.Event()

    def decode(self, inputs, decoding=None, **kwargs):
        self.started.set()
        assert self.release.wait(60), "never released"
        return super().decode(inputs, decoding, **kwargs)


def test_a_full_queue_answers_503_with_retry_after(translator):
    # one request decoding, one waiting in the queue of one: the next is refused at once
    gated = Gated(translator)
    limits = Limits(max_batch=1, max_wait_ms=0, max_queue=1)
    with serving(gated, limits) as url, ThreadPoolExecutor(2) as pool:

        def post():
            return httpx.post(f"{url}/translate", timeout=60, json={"text": TEXTS[0]})

        decoding = pool.submit(post)
        assert gated.started.wait(30)
        waiting = pool.submit(post)
        deadline = time.monotonic() + 30
        while httpx.get(f"{url}/health").json()["queue_depth"] < 1:
            assert time.monotonic() < deadline, "the second request never reached the queue"
            time.sleep(0.01)
        refused = post()
        gated.release.set()
        assert decoding.result().status_code == 200 and waiting.result().status_code == 200
    assert refused.status_code == 503, refused.text
    assert int(refused.headers["retry-after"]) >= 1 and "--max-queue" in refused.json()["error"]


def test_a_request_past_the_timeout_answers_504(translator):
    with serving(Proxy(translator, delay=1.0), Limits(timeout_s=0.3)) as url:
        r = httpx.post(f"{url}/translate", json={"text": TEXTS[0]}, timeout=30)
        assert r.status_code == 504 and "--timeout" in r.json()["error"]


def test_the_api_key_is_checked_on_every_request(translator):
    with serving(translator, api_key="s3cret") as url:
        for path in ("/health", "/metrics", "/openapi.json"):
            r = httpx.get(url + path)
            assert r.status_code == 401 and r.json()["field"] == "Authorization"
        assert (
            httpx.get(f"{url}/health", headers={"Authorization": "Bearer wrong"}).status_code == 401
        )
        assert (
            httpx.get(f"{url}/health", headers={"Authorization": "Bearer s3cret"}).status_code
            == 200
        )
        r = httpx.post(f"{url}/translate", json={"text": TEXTS[0]}, headers={"X-API-Key": "s3cret"})
        assert r.status_code == 200


def test_an_empty_key_is_refused_by_the_app_and_an_empty_header_is_no_key(translator):
    with pytest.raises(ValueError, match="api_key: empty"):
        create_app(translator, Limits(), api_key="")
    with serving(translator, api_key="s3cret") as url:
        for headers in (
            {"X-API-Key": ""},
            {"Authorization": "Bearer"},
            {"Authorization": "", "X-API-Key": ""},
        ):
            r = httpx.get(f"{url}/health", headers=headers)
            assert r.status_code == 401 and r.json()["field"] == "Authorization", headers
        r = httpx.get(f"{url}/health", headers={"X-API-Key": ""})
        assert r.json()["error"].endswith("got an empty key")


@pytest.mark.parametrize(
    "options, env, named",
    [
        (["--api-key", ""], {}, "--api-key"),
        (["--api-key", "  "], {}, "--api-key"),
        ([], {"ATTNKIT_API_KEY": ""}, "ATTNKIT_API_KEY"),
        (["--api-key-file", "{empty}"], {}, "--api-key-file"),
        (["--api-key-file", "{missing}"], {}, "--api-key-file"),
    ],
)
def test_an_empty_or_unreadable_api_key_is_refused_before_serving(
    tmp_path, capsys, monkeypatch, options, env, named
):
    import attnkit.serve
    from attnkit.cli.main import main

    def started(*args, **kwargs):
        raise AssertionError("the server started")

    monkeypatch.setattr(attnkit.serve, "serve_checkpoint", started)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "empty").write_text("\n")
    options = [o.format(empty=tmp_path / "empty", missing=tmp_path / "missing") for o in options]
    assert main(["serve", "--checkpoint", "builtin:translate-dates", *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"attnkit: {named}: ") and err.count("\n") == 1, err


def test_serve_help_says_the_key_option_shows_in_ps(capsys):
    from attnkit.cli.main import main

    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "visible to other users (ps)" in text
    assert "--api-key-file" in text and "ATTNKIT_API_KEY" in text


def test_the_command_takes_its_key_from_a_file_kept_out_of_ps(tmp_path):
    key = tmp_path / "key"
    key.write_text("s3cret\n")  # the line's end is not part of the key
    with command_serving("--api-key-file", str(key), env={"ATTNKIT_API_KEY": "other"}) as (
        proc,
        url,
    ):
        assert "s3cret" not in " ".join(proc.args)
        assert httpx.get(f"{url}/health", headers={"X-API-Key": ""}).status_code == 401
        assert httpx.get(f"{url}/health", headers={"X-API-Key": "other"}).status_code == 401
        assert httpx.get(f"{url}/health", headers={"X-API-Key": "s3cret"}).status_code == 200


def _png(path, array):
    Image.fromarray(array).save(path)
    return path


def test_read_takes_image_uploads(tmp_path):
    evaluator = load_evaluator("builtin:ocr-lines")
    ((image, _),) = generate_lines(1, split="test", seed=3, min_chars=5, max_chars=20)
    line = _png(tmp_path / "line.png", image.numpy())
    _png(tmp_path / "huge.png", np.zeros((40, 3000), np.uint8))  # posted by name below
    (tmp_path / "bad.png").write_bytes(b"not an image at all")
    (tmp_path / "empty.png").write_bytes(b"")
    expected = evaluator.decode(evaluator.load_inputs([str(line)])[0])[0].text
    with serving(evaluator, Limits(max_pixels=100_000)) as url:

        def post(name, **data):
            with open(tmp_path / name, "rb") as f:
                return httpx.post(f"{url}/read", files={"image": (name, f, "image/png")}, data=data)

        ok = post("line.png")
        assert ok.status_code == 200 and ok.json()["text"] == expected
        for name, data, field, words in (
            ("bad.png", {}, "image", "bad.png: cannot read image"),
            ("empty.png", {}, "image", "empty upload"),
            ("huge.png", {}, "image", "--max-pixels"),
            ("line.png", {"decoding": '{"max_len": 3}'}, "decoding.max_len", "prefix beam"),
            ("line.png", {"decoding": '{"beam": 1'}, "decoding", "JSON"),
            ("line.png", {"decoding": '{"wide": 1}'}, "decoding.wide", "not an option"),
        ):
            r = post(name, **data)
            assert r.status_code == 422 and r.json()["field"] == field, r.text
            assert words in r.json()["error"]
            assert "attnkit-upload" not in r.json()["error"]  # the upload's own name
        r = httpx.post(f"{url}/read", data={"decoding": "{}"})
        assert r.status_code == 415 and r.json()["field"] == "Content-Type"
        r = httpx.post(f"{url}/read", files={"picture": ("line.png", b"x", "image/png")})
        assert r.status_code == 422 and r.json()["field"] == "image"
        assert post("line.png").json()["text"] == expected


def test_transcribe_takes_wav_uploads_and_refuses_long_audio(tmp_path):
    evaluator = load_evaluator("builtin:asr-digits")
    t = torch.arange(16000) / 16000
    speech = write_wav(
        tmp_path / "a.wav", 0.3 * torch.sin(2 * torch.pi * 220 * t) * (t < 0.6), 16000
    )
    long = write_wav(tmp_path / "long.wav", torch.zeros(16000 * 3), 16000)
    alone = evaluator.decode(evaluator.load_inputs([str(speech)])[0], Decoding(beam=2))[0]
    with serving(evaluator, Limits(max_seconds=2)) as url:

        def post(path, **data):
            with open(path, "rb") as f:
                return httpx.post(
                    f"{url}/transcribe",
                    timeout=60,
                    files={"audio": (path.name, f, "audio/wav")},
                    data=data,
                )

        ok = post(speech, decoding=json.dumps({"beam": 2}))
        assert ok.status_code == 200, ok.text
        assert [o["text"] for o in ok.json()["outputs"]] == alone.texts
        r = post(long)
        assert r.status_code == 422 and r.json()["field"] == "audio"
        assert "long.wav: 3.0 s of audio, more than max_seconds=2" in r.json()["error"]
        (tmp_path / "bad.wav").write_bytes(b"RIFF....WAVEjunk")
        r = post(tmp_path / "bad.wav")
        assert r.status_code == 422 and r.json()["field"] == "audio"
        assert post(speech, decoding=json.dumps({"beam": 2})).status_code == 200


def test_caption_and_ask_take_image_uploads(tiny_captioner, tiny_vqa, tmp_path):  # noqa: F811
    picture = _png(
        tmp_path / "p.png", np.random.default_rng(0).integers(0, 255, (40, 50, 3), dtype=np.uint8)
    )
    captioner = load_evaluator(tiny_captioner)
    expected = captioner.decode(captioner.load_inputs([str(picture)])[0], Decoding(beam=5))[0]
    with serving(captioner) as url:
        r = httpx.post(f"{url}/caption", files={"image": ("p.png", picture.read_bytes())})
        assert r.status_code == 200 and r.json()["text"] == expected.text
    vqa = load_evaluator(tiny_vqa)
    question = "what color is the square"
    if vqa.words.unknown(question):
        question = " ".join(vqa.words.symbols[4:7])
    expected = vqa.decode(vqa.load_inputs([str(picture), question])[0])[0]
    with serving(vqa) as url:
        r = httpx.post(
            f"{url}/ask",
            files={"image": ("p.png", picture.read_bytes())},
            data={"question": question},
        )
        assert r.status_code == 200 and r.json()["text"] == expected.text
        r = httpx.post(
            f"{url}/ask",
            files={"image": ("p.png", picture.read_bytes())},
            data={"question": "zyzzyva"},
        )
        assert r.status_code == 422 and r.json()["field"] == "question"
        r = httpx.post(f"{url}/ask", files={"image": ("p.png", picture.read_bytes())})
        assert r.status_code == 422 and r.json()["field"] == "question"
        r = httpx.post(
            f"{url}/ask",
            files={"image": ("p.png", picture.read_bytes())},
            data={"question": question, "decoding": '{"beam": 2}'},
        )
        assert r.status_code == 422 and r.json()["field"] == "decoding"


@contextmanager
def command_serving(*options, env=None):
    """The running ``attnkit serve --checkpoint builtin:translate-dates --port 0 OPTIONS`` (a
    subprocess, its environment ``env``) and the base URL it says it listens on; killed on
    the way out if it is still running."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "attnkit",
            "serve",
            "--checkpoint",
            "builtin:translate-dates",
            "--port",
            "0",
            *options,
        ],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        url = None
        for line in proc.stderr:
            found = re.search(r"running on (http://127\.0\.0\.1:\d+)", line)
            if found:
                url = found.group(1)
                break
        assert url, "the server did not say where it listens"
        threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_command_finishes_requests_in_flight_on_sigterm():
    with command_serving(
        "--max-wait-ms", "3000", "--max-batch", "64", env={"ATTNKIT_API_KEY": "k"}
    ) as (proc, url):
        headers = {"Authorization": "Bearer k"}
        assert httpx.get(f"{url}/health").status_code == 401
        assert httpx.get(f"{url}/health", headers=headers).status_code == 200

        def ask(text):
            return httpx.post(f"{url}/translate", json={"text": text}, headers=headers, timeout=60)

        with ThreadPoolExecutor(4) as pool:
            pending = [pool.submit(ask, text) for text in TEXTS[:4]]
            deadline = time.monotonic() + 2.5
            while httpx.get(f"{url}/health", headers=headers).json()["queue_depth"] < 4:
                assert time.monotonic() < deadline, "the requests did not reach the queue"
                time.sleep(0.02)
            proc.send_signal(signal.SIGTERM)  # while they wait in the queue for their batch
            answers = [f.result() for f in pending]
        assert [r.status_code for r in answers] == [200] * 4
        assert all(r.json()["batch_size"] == 4 for r in answers)
        assert proc.wait(30) == 128 + signal.SIGTERM
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{url}/health", headers=headers)
