"""The HTTP side of the LLM judge (``--judge URL``): the URL checked before anything runs, and one
bounded POST of JSON whose reply is checked before anyone reads it.

The URL (:func:`check_url`): scheme http/https, a host, a port in 1–65535, no spaces, control
characters or fragment, at most MAX_URL_CHARS; credentials in it become an Authorization header and
are never printed. The reply (:func:`post_json`, :func:`check_completion`): redirects not followed,
one total deadline, read as a stream up to a byte cap, parsed as JSON, checked as a chat completion.

Everything the server sends is quoted, cut to a few dozen characters, in a line that names ``--judge``
(or the ``name`` given) — never a traceback, and never the URL's password.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import functools
import json
import math
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Optional

from ...errors import FileFormatError, SteerformerError, bad_argument

#: A judge's URL is a server's address and a path; longer is a paste gone wrong.
MAX_URL_CHARS = 2048
#: A chat completion of a few hundred tokens with five top logprobs each is ~100 kB; 4 MiB is ample,
#: and a server that sends more is not a judge (a 4 GB reply once ran this process out of memory).
MAX_REPLY_BYTES = 4 * 1024 * 1024
#: How much of an unexpected reply a message quotes.
SHOWN_CHARS = 80


class JudgeError(SteerformerError, RuntimeError):
    """An LLM judge did not answer (refused, timed out, or replied with something not a chat completion)."""


@dataclass(frozen=True)
class JudgeURL:
    """A checked judge URL: ``endpoint`` (where requests go; no credentials), ``shown`` (the endpoint as
    messages print it, with ``user:***@`` where the URL had credentials), ``auth`` (the Authorization header the credentials make, or None)."""

    endpoint: str
    shown: str
    auth: Optional[str] = None


def _quote(data: Any) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, (bytes, bytearray)) else str(data)
    return repr(text[:SHOWN_CHARS] + ("..." if len(text) > SHOWN_CHARS else ""))


def check_url(url: Any, name: str = "judge") -> JudgeURL:
    """``url`` checked as a judge server's address (the module docstring), or one line naming ``name``."""
    valid = "an http(s):// URL of an OpenAI-compatible server (e.g. http://127.0.0.1:8080)"
    fix = "Start llama.cpp's llama-server or vLLM and pass its URL."
    if not isinstance(url, str):
        raise bad_argument(name, type(url).__name__, valid)
    if len(url) > MAX_URL_CHARS:
        raise bad_argument(name, url[:40] + "...", f"{valid} of at most {MAX_URL_CHARS} characters")
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # raises on a port that is not a number in 0–65535
        host = parts.hostname
    except ValueError as exc:
        raise bad_argument(name, _redacted(url), f"{valid} ({exc})", fix) from None
    shown = _redacted(url)
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise bad_argument(name, shown, f"{valid}, without spaces or control characters", fix)
    if parts.scheme not in ("http", "https"):
        raise bad_argument(name, shown, f"{valid}; {parts.scheme or 'no'} scheme is not http or https", fix)
    if not host:
        raise bad_argument(name, shown, f"{valid}, with a host", fix)
    if port is not None and not 1 <= port <= 65535:
        raise bad_argument(name, shown, f"{valid}, with a port in 1-65535", fix)
    if parts.fragment or url.endswith("#"):
        raise bad_argument(name, shown, f"{valid}, without a #fragment (a server never sees it)", fix)
    auth = None
    if parts.username is not None or parts.password is not None:
        # sent as HTTP Basic (what a proxy in front of llama-server asks for); never in a message
        user = urllib.parse.unquote(parts.username or "")
        password = urllib.parse.unquote(parts.password or "")
        auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    netloc = parts.netloc.rsplit("@", 1)[-1]
    path = parts.path.rstrip("/")
    if not path.endswith("/chat/completions"):
        path += "/chat/completions" if path.endswith("/v1") else "/v1/chat/completions"
    endpoint = urllib.parse.urlunsplit((parts.scheme, netloc, path, parts.query, ""))
    shown = _redacted(urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, "")))
    return JudgeURL(endpoint=endpoint, shown=shown, auth=auth)


def _redacted(url: str) -> str:
    """``url`` with whatever sits before an ``@`` of its authority replaced: ``user:***@host``."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, tail = rest.partition("/")
    if "@" not in authority:
        return url
    userinfo, _, hostport = authority.rpartition("@")
    user = userinfo.split(":", 1)[0]
    return f"{scheme}://{user}:***@{hostport}{slash}{tail}"


class _Refused(Exception):
    """Internal: the reply broke a rule while it streamed in (message in args[0])."""


async def _post(endpoint: str, payload: bytes, headers: dict, deadline: float, max_bytes: int) -> tuple[int, dict, bytes]:
    import httpx

    # trust_env=False: no proxy, .netrc or certificate settings from the environment — the request goes
    # where the URL says, with the credentials the URL gives. Redirects are never followed.
    async with httpx.AsyncClient(follow_redirects=False, trust_env=False, timeout=deadline) as client:
        async with client.stream("POST", endpoint, content=payload, headers=headers) as resp:
            encoding = resp.headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                raise _Refused(f"a reply with Content-Encoding {encoding!r} (asked for identity)")
            declared = resp.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > max_bytes:
                raise _Refused(f"a reply of {int(declared)} bytes (more than {max_bytes})")
            buf = bytearray()
            async for chunk in resp.aiter_raw():
                buf += chunk
                if len(buf) > max_bytes:
                    raise _Refused(f"a reply longer than {max_bytes} bytes")
            return resp.status_code, dict(resp.headers), bytes(buf)


def _run(coro_factory, deadline: float):
    """Run the coroutine to completion in a thread of its own (a Jupyter kernel's running loop is never
    touched), cancelled at ``deadline`` seconds: one total deadline, whatever the server trickles."""

    async def bounded():
        return await asyncio.wait_for(coro_factory(), timeout=deadline)

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, bounded()).result()


def post_json(url: JudgeURL, body: Any, *, deadline: float, max_bytes: int = MAX_REPLY_BYTES, name: str = "judge",
              headers: dict | None = None) -> Any:
    """POST ``body`` as JSON to ``url.endpoint`` and return the reply's JSON — or one :class:`JudgeError`
    line naming ``name`` and what the server sent: a status other than 200 (a redirect included), no
    reply within ``deadline`` seconds in all, more than ``max_bytes``, a reply that is not JSON."""
    import httpx

    from ...results import parse_json

    if isinstance(deadline, bool) or not isinstance(deadline, (int, float)) or not 0 < deadline < math.inf:
        raise bad_argument("timeout", deadline, "seconds > 0")
    where = f"{name} {url.shown}"
    sent = {"Content-Type": "application/json", "Accept": "application/json", "Accept-Encoding": "identity",
            **(headers or {})}
    if url.auth is not None:
        sent["Authorization"] = url.auth
    payload = json.dumps(body).encode()
    started = time.monotonic()
    try:
        status, got, data = _run(lambda: _post(url.endpoint, payload, sent, float(deadline), max_bytes), deadline)
    except (asyncio.TimeoutError, httpx.TimeoutException):
        raise JudgeError(f"{where}: no complete reply within {deadline:g} s (the deadline of one request; "
                         f"the server took {time.monotonic() - started:.1f} s)") from None
    except _Refused as exc:
        raise JudgeError(f"{where}: the server sent {exc.args[0]}; a judge's reply is one chat completion") from None
    except httpx.HTTPError as exc:
        why = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise JudgeError(f"{where} did not answer: {why} (is the server running? --judge offline needs none)") from None
    except OSError as exc:
        raise JudgeError(f"{where} did not answer: {exc.strerror or exc}") from None
    if 300 <= status < 400:
        raise JudgeError(f"{where}: the server answered HTTP {status}, a redirect to {_quote(got.get('location', ''))}; "
                         "redirects are not followed — pass the URL it redirects to")
    if status != 200:
        raise JudgeError(f"{where}: the server answered HTTP {status}: {_quote(data)}")
    try:
        return parse_json(data, where)
    except FileFormatError as exc:
        raise JudgeError(f"{where}: the server sent {exc.reason}: {_quote(data)}") from None


# ---- the reply's schema ----------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _schemas():  # built on first use: pydantic is not imported by `steerformer --help`
    from pydantic import BaseModel, ConfigDict, Field, field_validator

    class Alternative(BaseModel):
        model_config = ConfigDict(extra="ignore", strict=True)
        token: str = Field(max_length=1000)
        logprob: float

        @field_validator("logprob", mode="before")
        @classmethod
        def finite(cls, v):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v > 1e-6:
                raise ValueError("a finite log probability <= 0")
            return float(v)

    class TokenLogprob(Alternative):
        top_logprobs: Optional[list[Alternative]] = Field(default=None, max_length=100)

    class Logprobs(BaseModel):
        model_config = ConfigDict(extra="ignore", strict=True)
        content: Optional[list[TokenLogprob]] = Field(default=None, max_length=100_000)

    class Message(BaseModel):
        model_config = ConfigDict(extra="ignore", strict=True)
        content: Optional[str] = Field(default=None, max_length=MAX_REPLY_BYTES)

    class Choice(BaseModel):
        model_config = ConfigDict(extra="ignore", strict=True)
        message: Message
        logprobs: Optional[Logprobs] = None

    class Completion(BaseModel):
        model_config = ConfigDict(extra="ignore", strict=True)
        choices: list[Choice] = Field(min_length=1, max_length=1000)

    return Completion


def check_completion(reply: Any, shown: str, name: str = "judge"):
    """``reply`` checked as a chat completion (the schema above), or one :class:`JudgeError` line
    naming ``name``, ``shown`` (the URL) and the first field that is wrong."""
    from pydantic import ValidationError

    try:
        return _schemas().model_validate(reply)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "the top level"
        raise JudgeError(f"{name} {shown}: the server sent something not a chat completion: {field}: "
                         f"{first['msg']} (got {_quote(json.dumps(first.get('input'), default=str))})") from None
