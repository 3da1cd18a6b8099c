"""Publishing a steered checkpoint or adapter folder with huggingface_hub (the upload itself, with
its timeouts and one-line failures, is ``upload.py``)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from ..errors import bad_argument
from .checkpoint import save_steered
from .upload import DEFAULT_TIMEOUT, HubError, hub_target, upload_folder

__all__ = ["HubError", "push_to_hub"]


def push_to_hub(model: Any, repo_id: str, *, private: bool = False, token: str | None = None,
                endpoint: str | None = None, commit_message: str | None = None, revision: str | None = None,
                create_pr: bool = False, timeout: float = DEFAULT_TIMEOUT) -> str:
    """Upload a folder written by ``save_steered`` (or save a steered model first) to ``repo_id``.

    ``token``: the Hub token; default the one huggingface_hub finds (``HF_TOKEN``, the login
    cache); none at all is an error before any request. ``endpoint``: default ``HF_ENDPOINT``.
    ``revision``: the branch to commit to (created when missing; default the main branch);
    ``create_pr``: open a pull request instead of committing to the branch. ``timeout``: seconds
    each request may wait for the endpoint. Returns the commit URL (the pull request's with
    ``create_pr``)."""
    target = hub_target(repo_id, private=private, token=token, endpoint=endpoint, commit_message=commit_message,
                        revision=revision, create_pr=create_pr, timeout=timeout)
    message = "Upload steered model (steerformer)"
    if isinstance(model, (str, os.PathLike)):
        folder = Path(model)
        if not (folder / "config.json").is_file() and not (folder / "adapter_config.json").is_file():
            raise bad_argument("model", str(folder), "a checkpoint or adapter folder written by save_steered")
        return upload_folder(target, folder, default_message=message, saved=folder)
    with tempfile.TemporaryDirectory(prefix="steerformer-push-") as tmp:
        folder = save_steered(model, Path(tmp) / "model")
        return upload_folder(target, folder, default_message=message)
