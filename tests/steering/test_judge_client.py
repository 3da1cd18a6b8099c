"""The LLM judge's HTTP client against stub servers on 127.0.0.1 that misbehave on purpose: redirects,
credentials, a trickle, a flood, and replies that are not chat completions — each one line naming
--judge (never a traceback, never the password), and a bad URL refused before anything runs."""

from __future__ import annotations

import base64
import json
import socket
import socketserver
import threading
import time

import pytest

from steerformer.errors import InvalidArgumentError
from steerformer.steering.evaluation.judge import ChatJudge, JudgeItem, make_judge, parse_rating
from steerformer.steering.evaluation.judge_client import JudgeError, check_url, post_json
from tests.cli_process import one_error_line, run_cli_here

ITEM = JudgeItem(question="How can I improve my sleep?", answer="The ocean, the ocean.", concept="ocean")


class RawServer:
    """A TCP server on 127.0.0.1 whose ``handle(conn, request_bytes)`` writes whatever bytes it likes;
    every request it read is kept in ``requests`` (headers and body, as bytes)."""

    def __init__(self, handle) -> None:
        self.requests: list[bytes] = []
        server = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                self.request.settimeout(5)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = self.request.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                while len(body) < length:
                    body += self.request.recv(65536)
                server.requests.append(head + b"\r\n\r\n" + body)
                try:
                    handle(self.request, head)
                except OSError:  # the client hung up (as it must, at its deadline or cap)
                    pass

        socketserver.ThreadingTCPServer.daemon_threads = True
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "RawServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def reply(body: bytes | str, status: str = "200 OK", headers: dict | None = None):
    """A handler that sends one complete HTTP/1.1 response."""
    data = body.encode() if isinstance(body, str) else body

    def handle(conn, head) -> None:
        sent = {"Content-Type": "application/json", "Content-Length": str(len(data)), "Connection": "close",
                **(headers or {})}
        conn.sendall(f"HTTP/1.1 {status}\r\n".encode()
                     + "".join(f"{k}: {v}\r\n" for k, v in sent.items()).encode() + b"\r\n" + data)

    return handle


def completion(content, logprobs=None) -> str:
    choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
    if logprobs is not None:
        choice["logprobs"] = logprobs
    return json.dumps({"object": "chat.completion", "choices": [choice]})


GOOD = completion("Clear.\nRating: [[2]]")


def one_line_naming_judge(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and "Traceback" not in text and text.startswith("--judge"), text
    return text


# ---- the URL, checked before anything runs ---------------------------------------------------------
@pytest.mark.parametrize("url", [
    "http://[::1", "http://127.0.0.1:99999", "http://127.0.0.1:0", "http://host name:8080", "http://host\x00:80",
    "ftp://127.0.0.1", "file:///etc/passwd", "http://", "127.0.0.1:8080", "", "http://h/#frag", "http://h/" + "a" * 3000,
])
def test_a_bad_judge_url_is_refused_in_one_line_before_any_request(url) -> None:
    with pytest.raises(InvalidArgumentError) as exc:
        make_judge(url, name="--judge")
    assert "\n" not in str(exc.value) and str(exc.value).startswith("--judge=")


def test_judge_model_without_a_judge_url_is_refused() -> None:
    for spec in ("offline", "none", None):
        with pytest.raises(InvalidArgumentError, match="--judge-model.*--judge"):
            make_judge(spec, model="llama", name="--judge", model_name="--judge-model")
    for model in ("", "a\x00b", "m" * 1000):
        with pytest.raises(InvalidArgumentError, match="--judge-model"):
            make_judge("http://127.0.0.1:8080", model=model, name="--judge", model_name="--judge-model")


# ---- redirects, credentials --------------------------------------------------------------------
@pytest.mark.parametrize("target", ["other", "ftp://127.0.0.1/x"])
def test_a_redirect_is_not_followed(target) -> None:
    with RawServer(reply(GOOD)) as other:
        location = other.url + "/v1/chat/completions" if target == "other" else target
        with RawServer(reply("", "302 Found", {"Location": location})) as first:
            with pytest.raises(JudgeError) as exc:
                ChatJudge(first.url, timeout=5, flag="--judge")([ITEM])
        assert other.requests == []  # the other server never heard of us
    text = one_line_naming_judge(exc.value)
    assert "HTTP 302" in text and "redirect" in text and "not followed" in text


def test_credentials_in_the_url_go_in_an_authorization_header_and_are_never_printed() -> None:
    with RawServer(reply('{"error": "boom"}', "500 Internal Server Error")) as server:
        url = server.url.replace("http://", "http://alice:s3cret%21@")
        with pytest.raises(JudgeError) as exc:
            ChatJudge(url, timeout=5, flag="--judge")([ITEM])
    text = one_line_naming_judge(exc.value)
    assert "HTTP 500" in text and "s3cret" not in text and "alice:***@" in text
    head = server.requests[0].split(b"\r\n\r\n")[0].decode()
    assert f"Authorization: Basic {base64.b64encode(b'alice:s3cret!').decode()}" in head
    assert f"Host: {server.url[len('http://'):]}\r\n" in head + "\r\n"  # the host alone, no user in it
    with pytest.raises(InvalidArgumentError) as exc:
        make_judge("http://alice:s3cret@127.0.0.1:99999", name="--judge")
    assert "s3cret" not in str(exc.value)


# ---- the deadline and the size cap -------------------------------------------------------------------
def trickle(conn, head) -> None:
    """Headers, then one byte of a 1000-byte body every 0.1 s (each read well within any read timeout)."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
    for _ in range(1000):
        conn.sendall(b" ")
        time.sleep(0.1)


def test_a_server_trickling_bytes_is_cut_at_the_total_deadline() -> None:
    with RawServer(trickle) as server:
        started = time.monotonic()
        with pytest.raises(JudgeError) as exc:
            ChatJudge(server.url, timeout=0.8, flag="--judge")([ITEM])
        took = time.monotonic() - started
    assert 0.7 < took < 3.0, took  # the deadline, not 1000 × 0.1 s
    assert "within 0.8 s" in one_line_naming_judge(exc.value)


def flood(conn, head) -> None:
    """A 200 with no length, then bytes until the client hangs up."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
    block = b"[" * 65536
    for _ in range(10_000):  # at most 655 MB, cut long before by the cap
        conn.sendall(block)


def test_a_reply_larger_than_the_cap_is_refused_while_it_streams() -> None:
    with RawServer(flood) as server:
        with pytest.raises(JudgeError) as exc:
            post_json(check_url(server.url), {"x": 1}, deadline=10, max_bytes=200_000, name="--judge")
    assert "longer than 200000 bytes" in one_line_naming_judge(exc.value)
    with RawServer(reply(b"x", headers={"Content-Length": "5000000000"})) as server:  # a declared 5 GB
        with pytest.raises(JudgeError, match="5000000000 bytes"):
            post_json(check_url(server.url), {"x": 1}, deadline=10, name="--judge")


# ---- replies that are not chat completions -------------------------------------------------------
def cut_short(conn, head) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"choi")
    conn.shutdown(socket.SHUT_WR)


def bad_status_line(conn, head) -> None:
    conn.sendall(b"HTTP/1.1 2OO FINE\r\n\r\n{}")


BAD_LOGPROB = {"content": [{"token": "Rating: [[", "logprob": 0.0, "top_logprobs": []},
                           {"token": "2", "logprob": 0.0, "top_logprobs": [{"token": "2", "logprob": "NaN"}]}]}


@pytest.mark.parametrize("handle, words", [
    (reply("not json at all"), "not valid JSON"),
    (reply("[1, 2]"), "not a chat completion"),
    (reply('{"choices": []}'), "choices"),
    (reply('{"choices": "yes"}'), "choices"),
    (reply('{"choices": [{"message": {"content": 7}}]}'), "choices.0.message.content"),
    (reply('{"choices": [{"message": null}]}'), "choices.0.message"),
    (reply(completion("Rating: [[2]]", BAD_LOGPROB)), "logprob"),
    (reply(completion("Rating: [[2]]", BAD_LOGPROB).replace('"NaN"', "NaN")), "finite"),
    (reply(completion("Rating: [[2]]", BAD_LOGPROB).replace('"NaN"', "1e400")), "finite"),
    (reply(completion("Rating: [[7]]")), "outside [0, 2]"),
    (reply(completion("Rating: [[2.5]]")), "outside [0, 2]"),
    (reply(GOOD, headers={"Content-Encoding": "gzip"}), "Content-Encoding"),
    (reply("{}", "503 Service Unavailable"), "HTTP 503"),
    (cut_short, "did not answer"),
    (bad_status_line, "did not answer"),
])
def test_a_reply_that_is_not_a_chat_completion_is_one_line(handle, words) -> None:
    with RawServer(handle) as server:
        with pytest.raises(JudgeError) as exc:
            ChatJudge(server.url, timeout=5, flag="--judge")([ITEM])
    text = one_line_naming_judge(exc.value)
    assert words in text and server.url in text, text


def test_a_well_formed_reply_is_still_read() -> None:
    with RawServer(reply(GOOD)) as server:
        (rating,) = ChatJudge(server.url, timeout=5)([ITEM])
    assert (rating.concept, rating.relevance, rating.fluency) == (2, 2, 2)


def test_a_rating_outside_the_scale_is_an_error_not_a_silent_zero() -> None:
    with pytest.raises(JudgeError, match="outside"):
        parse_rating("Rating: [[5]]")
    assert parse_rating("no rating") is None


# ---- the CLI: refused before any model loads ---------------------------------------------------------
@pytest.mark.parametrize("args, words", [
    (["steer", "no-such-model-dir", "--token", "x", "--evaluate", "--judge", ""], "--judge=''"),
    (["steer", "no-such-model-dir", "--token", "x", "--evaluate", "--judge", "http://[::1"], "--judge="),
    (["steer", "no-such-model-dir", "--token", "x", "--evaluate", "--judge-model", "m"], "--judge-model"),
    (["steer", "no-such-model-dir", "--token", "x", "--judge-model", "m"], "--judge-model"),
    (["evaluate", "no-such-model-dir", "--token", "x", "--out", "OUT", "--judge", "http://h:99999"], "--judge="),
    (["evaluate", "no-such-model-dir", "--token", "x", "--out", "OUT", "--judge-model", "m"], "--judge-model"),
])
def test_the_cli_refuses_a_bad_judge_before_the_model(args, words, tmp_path) -> None:
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    line = one_error_line(run_cli_here(args, cwd=tmp_path))
    assert words in line and "no-such-model-dir" not in line, line  # the judge was refused first, not the model
