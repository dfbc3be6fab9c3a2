"""``attnkit serve`` against clients that stall (issue 57: 300 slow connections stayed open
45 s+, only the fd limit bounding them): a real server on localhost, real sockets that open
and send nothing, send half a request's headers or half its body, or stay idle after an
answer; each is closed within the documented time (``--read-timeout``, ``--keep-alive``)."""

import socket
import time

import httpx
import pytest

from attnkit.serve import Limits
from attnkit.tasks.loading import load_evaluator
from tests.serve.test_serve import command_serving, serving

READ_S, KEEP_ALIVE_S = 1.0, 0.5
SLACK_S = 1.5  # the event loop's timer and the test's own scheduling, on a busy machine


@pytest.fixture(scope="module")
def url():
    with serving(
        load_evaluator("builtin:translate-dates"),
        Limits(read_timeout_s=READ_S, keep_alive_s=KEEP_ALIVE_S),
    ) as url:
        yield url


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.settimeout(READ_S + 10)
    return sock


def _seconds_until_closed(sock: socket.socket, opened: float) -> tuple[float, bytes]:
    """Seconds from ``opened`` until the server closes ``sock``, and what it sent before."""
    received = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            return time.monotonic() - opened, received
        received += chunk


HEAD = (
    b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 100\r\n"
)


@pytest.mark.parametrize(
    "sent",
    [b"", HEAD, HEAD + b"\r\n" + b'{"text": "<en> 3 Ma'],
    ids=["nothing", "half the headers", "half the body"],
)
def test_a_request_not_sent_whole_within_the_read_timeout_is_closed(url, sent):
    sock = _connect(url)
    opened = time.monotonic()
    try:
        sock.sendall(sent)
        took, answer = _seconds_until_closed(sock, opened)
    finally:
        sock.close()
    assert READ_S - 0.1 <= took <= READ_S + SLACK_S, took
    assert answer == b""
    assert httpx.get(f"{url}/health").status_code == 200  # the server serves on


def test_many_slow_connections_are_all_closed(url):
    socks = [_connect(url) for _ in range(50)]
    opened = time.monotonic()
    try:
        for sock in socks:
            sock.sendall(HEAD)
        took = max(_seconds_until_closed(sock, opened)[0] for sock in socks)
    finally:
        for sock in socks:
            sock.close()
    assert took <= READ_S + SLACK_S, took


def test_an_idle_connection_after_an_answer_is_closed_after_the_keep_alive(url):
    sock = _connect(url)
    try:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        answered = time.monotonic()
        took, answer = _seconds_until_closed(sock, answered)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert took <= KEEP_ALIVE_S + SLACK_S, took


def test_requests_sent_whole_are_answered_on_one_connection(url):
    with httpx.Client() as client:  # keeps its connection alive between requests
        for _ in range(3):
            r = client.post(f"{url}/translate", json={"text": "<en> 3 March 2001"})
            assert r.status_code == 200 and r.json()["text"] == "2001-03-03"
            time.sleep(KEEP_ALIVE_S / 2)


def test_the_timeouts_are_positive_numbers():
    for name in ("read_timeout_s", "keep_alive_s"):
        with pytest.raises(ValueError, match=f"{name}: expected a finite positive number, got 0"):
            Limits(**{name: 0})


def test_the_command_takes_the_timeouts():
    with command_serving("--read-timeout", str(READ_S), "--keep-alive", str(KEEP_ALIVE_S)) as (
        _,
        url,
    ):
        sock = _connect(url)
        opened = time.monotonic()
        sock.sendall(HEAD)
        took, _ = _seconds_until_closed(sock, opened)
        sock.close()
    assert READ_S - 0.1 <= took <= READ_S + SLACK_S, took
