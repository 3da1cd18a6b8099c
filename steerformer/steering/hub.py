"""Publishing a steered checkpoint with huggingface_hub (create the repo, upload the folder)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from ..errors import InvalidArgumentError, bad_argument


def check_repo_id(repo_id: str) -> str:
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if not isinstance(repo_id, str) or repo_id.count("/") != 1:
        raise bad_argument("repo_id", repo_id, "'namespace/name' (e.g. 'alice/minilm-steered')")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise bad_argument("repo_id", repo_id, f"a valid Hub repo id ({exc})") from None
    return repo_id


def push_to_hub(dir_or_model: Any, repo_id: str, *, private: bool = False, token: str | None = None,
                endpoint: str | None = None, commit_message: str | None = None) -> str:
    """Upload a folder written by ``save_steered`` (or save a steered model first) to ``repo_id``.

    ``token``: the Hub token; default the one huggingface_hub finds (``HF_TOKEN``, the login
    cache); none at all is an error before any request. ``endpoint``: default ``HF_ENDPOINT``.
    Returns the commit URL."""
    from huggingface_hub import HfApi, constants, get_token

    check_repo_id(repo_id)
    token = token or get_token()
    if not token:
        raise InvalidArgumentError("push_to_hub needs a Hugging Face token: pass token=..., set HF_TOKEN, or run "
                                   "`hf auth login` (no request was sent).")
    # huggingface_hub < 1.0 (what transformers 4.x pins) has no is_offline_mode(): read the flag.
    offline = getattr(constants, "is_offline_mode", lambda: constants.HF_HUB_OFFLINE)
    if offline():
        raise InvalidArgumentError("push_to_hub cannot upload while HF_HUB_OFFLINE is set: unset it to publish.")
    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None
    api = HfApi(endpoint=endpoint, token=token)
    if isinstance(dir_or_model, (str, os.PathLike)):
        folder = Path(dir_or_model)
        if not (folder / "config.json").is_file():
            raise bad_argument("dir_or_model", str(folder), "a checkpoint folder written by save_steered")
        return _upload(api, folder, repo_id, private, commit_message)
    from .save import save_steered

    with tempfile.TemporaryDirectory(prefix="steerformer-push-") as tmp:
        folder = save_steered(dir_or_model, Path(tmp) / "model")
        return _upload(api, folder, repo_id, private, commit_message)


def _upload(api, folder: Path, repo_id: str, private: bool, message: str | None) -> str:
    api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    info = api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model",
                             commit_message=message or "Upload steered model (steerformer)")
    return str(getattr(info, "commit_url", info))
