"""The output folder of a collapse run, written pass by pass so that an interrupted run keeps
what it measured and can be resumed bit for bit.

Layout: ``run.json`` (options, model facts), ``prompts.npy`` (token ids), ``embedding.npz``
(statistics of the embedded prompts), ``passes/pass_000001.npz`` … (one per completed pass),
``state.pt`` (the hidden states after the last completed pass and its number). A pass file is
written before the state that follows it, each atomically, so ``state.pt`` never claims a pass
whose file is missing; a pass file beyond the state is simply recomputed on resume.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import InvalidArgumentError, bad_argument

RUN_FILE, PROMPTS_FILE, EMBED_FILE, STATE_FILE, PASS_DIR = "run.json", "prompts.npy", "embedding.npz", "state.pt", "passes"


def _atomic(path: Path, write) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


class RunStore:
    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    @classmethod
    def open(cls, out: str | os.PathLike, *, resume: bool) -> "RunStore":
        """Create (or reopen with ``resume``) the folder ``out``, checking that it can be written."""
        path = Path(out).expanduser()
        if path.exists() and not path.is_dir():
            raise bad_argument("out", str(out), "a folder (this path is a file)", "Pass a new folder name.")
        try:
            (path / PASS_DIR).mkdir(parents=True, exist_ok=True)
            probe = path / ".write_probe"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise bad_argument("out", str(out), f"a folder that can be written ({exc.strerror or exc})",
                               "Pick a folder you have write permission for.") from None
        store = cls(path)
        if not resume and store.completed_passes() > 0:
            raise bad_argument("out", str(out), "an empty folder or resume=True — it already holds "
                               f"{store.completed_passes()} completed passes",
                               "Pass --resume to continue that run, or another --out folder.")
        if resume and not (path / RUN_FILE).is_file():
            raise bad_argument("out", str(out), "a folder written by an earlier collapse run (no run.json)",
                               "Drop --resume to start a new run there.")
        return store

    # ---- run description and prompts -------------------------------------------------------
    def write_run(self, info: dict) -> None:
        _atomic(self.path / RUN_FILE, lambda p: Path(p).write_text(json.dumps(info, indent=2, default=str)))

    def read_run(self) -> dict:
        return json.loads((self.path / RUN_FILE).read_text())

    def write_prompts(self, ids: np.ndarray) -> None:
        _atomic(self.path / PROMPTS_FILE, lambda p: np.save(open(p, "wb"), ids))

    def read_prompts(self) -> np.ndarray:
        return np.load(self.path / PROMPTS_FILE)

    def write_embedding(self, arrays: dict[str, np.ndarray]) -> None:
        _atomic(self.path / EMBED_FILE, lambda p: np.savez(open(p, "wb"), **arrays))

    def read_embedding(self) -> dict[str, np.ndarray]:
        with np.load(self.path / EMBED_FILE) as z:
            return {k: z[k] for k in z.files}

    # ---- passes ------------------------------------------------------------------------------
    def pass_file(self, index: int) -> Path:
        return self.path / PASS_DIR / f"pass_{index + 1:06d}.npz"

    def append_pass(self, index: int, arrays: dict[str, np.ndarray]) -> None:
        _atomic(self.pass_file(index), lambda p: np.savez(open(p, "wb"), **arrays))

    def read_passes(self, count: int) -> dict[str, np.ndarray]:
        """The arrays of passes 0..count-1 stacked along a new first axis."""
        rows: dict[str, list] = {}
        for i in range(count):
            with np.load(self.pass_file(i)) as z:
                for k in z.files:
                    rows.setdefault(k, []).append(z[k])
        return {k: np.stack(v) for k, v in rows.items()}

    def save_state(self, completed: int, hidden: torch.Tensor, extra: dict[str, Any] | None = None) -> None:
        blob = {"completed": int(completed), "hidden": hidden.detach().cpu(), **(extra or {})}
        _atomic(self.path / STATE_FILE, lambda p: torch.save(blob, p))

    def load_state(self) -> dict[str, Any] | None:
        f = self.path / STATE_FILE
        if not f.is_file():
            return None
        return torch.load(f, map_location="cpu", weights_only=True)

    def completed_passes(self) -> int:
        state = self.path / STATE_FILE
        if not state.is_file():
            return 0
        try:
            return int(torch.load(state, map_location="cpu", weights_only=True)["completed"])
        except Exception as exc:  # a truncated file from a killed writer cannot happen (atomic), but say so
            raise InvalidArgumentError(f"out={str(self.path)!r}: {STATE_FILE} cannot be read ({exc}); "
                                       "remove it to restart the run from scratch") from None
