"""Uploading a folder to the Hugging Face Hub (create the repo, commit the folder), shared by every
artefact steerformer publishes (a steered checkpoint or adapter: ``hub.py``; a direction:
``direction.py``).

Every request has a timeout (``timeout``, default 30 s): an endpoint that accepts the connection
but never answers, or one that refuses it, ends the push with one :class:`HubError` line. The
timeout is set on huggingface_hub's shared HTTP client for the duration of the push only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from pathlib import Path
from typing import Iterator

from huggingface_hub import HfApi, constants, get_token
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import get_session, validate_repo_id

from ..errors import InvalidArgumentError, SteerformerError, bad_argument

DEFAULT_TIMEOUT = 30.0


class HubError(SteerformerError, RuntimeError):
    """The Hub endpoint did not answer in time, refused the connection, or refused the request."""


def check_repo_id(repo_id: str) -> str:
    if not isinstance(repo_id, str) or repo_id.count("/") != 1:
        raise bad_argument("repo_id", repo_id, "'namespace/name' (e.g. 'alice/minilm-steered')")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise bad_argument("repo_id", repo_id, f"a valid Hub repo id ({exc})") from None
    return repo_id


@dataclasses.dataclass
class HubTarget:
    """Where and how a push goes, checked before any request (token, offline flag, timeout)."""

    api: object
    repo_id: str
    where: str
    timeout: float
    private: bool
    commit_message: str | None
    revision: str | None
    create_pr: bool


def hub_target(repo_id: str, *, private: bool = False, token: str | None = None, endpoint: str | None = None,
               commit_message: str | None = None, revision: str | None = None, create_pr: bool = False,
               timeout: float = DEFAULT_TIMEOUT) -> HubTarget:
    """The checked arguments of a push (module doc): a bad repo id, timeout or revision, no token at
    all, or ``HF_HUB_OFFLINE`` are refused before any request. ``endpoint``: default ``HF_ENDPOINT``."""
    check_repo_id(repo_id)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout <= 0:
        raise bad_argument("timeout", timeout, "a number of seconds > 0", "The default is 30.")
    if revision is not None and (not isinstance(revision, str) or not revision.strip()):
        raise bad_argument("revision", revision, "a branch name such as 'steered-v2'")
    token = token or get_token()
    if not token:
        raise InvalidArgumentError("push_to_hub needs a Hugging Face token: pass token=..., set HF_TOKEN, or run "
                                   "`hf auth login` (no request was sent).")
    # huggingface_hub < 1.0 (what transformers 4.x pins) has no is_offline_mode(): read the flag.
    if getattr(constants, "is_offline_mode", lambda: constants.HF_HUB_OFFLINE)():
        raise InvalidArgumentError("push_to_hub cannot upload while HF_HUB_OFFLINE is set: unset it to publish.")
    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None
    return HubTarget(api=HfApi(endpoint=endpoint, token=token), repo_id=repo_id, where=endpoint or constants.ENDPOINT,
                     timeout=float(timeout), private=private, commit_message=commit_message, revision=revision,
                     create_pr=create_pr)


def upload_folder(target: HubTarget, folder: Path, *, default_message: str, saved: Path | None = None) -> str:
    """Create the repo (if needed) and commit ``folder`` to it; returns the commit URL (the pull
    request's with ``create_pr``). ``saved``: a folder the user keeps, named in a failure's line."""
    api, repo_id, revision, create_pr = target.api, target.repo_id, target.revision, target.create_pr
    with _timeout(target.timeout), _one_line(target.where, target.timeout, saved):
        api.create_repo(repo_id, private=target.private, exist_ok=True, repo_type="model")
        if revision is not None and not create_pr:
            api.create_branch(repo_id, branch=revision, repo_type="model", exist_ok=True)
        info = api.upload_folder(folder_path=str(Path(folder)), repo_id=repo_id, repo_type="model", revision=revision,
                                 create_pr=create_pr, commit_message=target.commit_message or default_message)
    return str(info.pr_url) if create_pr and getattr(info, "pr_url", None) else str(getattr(info, "commit_url", info))


@contextlib.contextmanager
def _timeout(seconds: float) -> Iterator[None]:
    """Give huggingface_hub's shared HTTP client a timeout for the duration of the block:
    httpx clients (huggingface_hub >= 1.0) carry it as an attribute; requests sessions (older
    versions) get it as the default of each request."""
    session = get_session()
    if hasattr(session, "timeout"):  # httpx
        old = session.timeout
        session.timeout = seconds
        try:
            yield
        finally:
            session.timeout = old
        return
    request = session.request

    def with_timeout(method, url, *args, **kwargs):
        kwargs["timeout"] = kwargs.get("timeout") or seconds
        return request(method, url, *args, **kwargs)

    session.request = with_timeout
    try:
        yield
    finally:
        del session.request  # back to the class's method


@contextlib.contextmanager
def _one_line(endpoint: str, timeout: float, folder: Path | None) -> Iterator[None]:
    """Network failures as one HubError line naming the endpoint, the wait and what to do."""
    saved = f" The folder is kept in {folder}." if folder is not None else ""
    try:
        yield
    except SteerformerError:
        raise
    except Exception as exc:
        names = {c.__name__ for c in type(exc).__mro__}
        first = (str(exc).splitlines() or [""])[0][:200]
        if any("Timeout" in n for n in names):
            raise HubError(f"the Hub endpoint {endpoint} did not answer within {timeout:g} s "
                           f"({type(exc).__name__}).{saved} Retry later, or allow more time with timeout= "
                           "(CLI: --hub-timeout).") from None
        if any(n in ("ConnectError", "ConnectionError", "NewConnectionError") for n in names):
            raise HubError(f"cannot connect to the Hub endpoint {endpoint} ({first}).{saved} Check the network "
                           "and HF_ENDPOINT.") from None
        if "HfHubHTTPError" in names:
            raise HubError(f"the Hub endpoint {endpoint} refused the upload: {first}.{saved}") from None
        raise
