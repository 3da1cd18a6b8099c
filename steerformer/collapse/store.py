"""The output folder of a collapse run, written pass by pass so that an interrupted run keeps
what it measured and can be resumed bit for bit.

Layout: ``run.json`` (options, model facts), ``prompts.npy`` (token ids), ``embedding.npz``
(statistics of the embedded prompts), ``passes/pass_000001.npz`` … (one per completed pass),
``state.pt`` (the hidden states after the last completed pass and its number). A pass file is
written before the state that follows it, each atomically, so ``state.pt`` never claims a pass
whose file is missing; a pass file beyond the state is simply recomputed on resume.

Verified resume: ``run.json`` holds ``integrity`` — the sha256 of ``prompts.npy``,
``embedding.npz``, every pass file and the ``state.pt`` written after every pass (plus the state's
shape and dtype). The state's hash is put in ``run.json`` *before* the state file is moved into
place, so ``run.json`` may list one pass more than ``state.pt`` (a kill in between; that pass is
recomputed) but never fewer. :meth:`RunStore.verify` checks every piece a resume reads against
these hashes and refuses, naming the first mismatch; a store written before hashes were recorded
cannot be verified and is refused too (start a new run: there is no trust-me switch).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import CheckpointError, FileFormatError, InvalidArgumentError, bad_argument
from ..files import sha256_of
from ..outputs import (
    COLLAPSE, check_output_folder, in_plain_words, is_write_failure, write_failed, write_file_atomically, writer_lock,
)
from ..results import json_text, read_json
from ..schemas import CollapseRun, checked

RUN_FILE, PROMPTS_FILE, EMBED_FILE, STATE_FILE, PASS_DIR = "run.json", "prompts.npy", "embedding.npz", "state.pt", "passes"
#: What a finished (or interrupted) run adds: the result's files.
RESULT_FILES = ("collapse.json", "collapse.npz", "collapse.png", "decode.json")


def _atomic(path: Path, write) -> None:
    write_file_atomically(path, lambda tmp: write(str(tmp)))


def _to_file(path: str, write) -> None:
    with open(path, "wb") as f:  # a file object: given a path, np.save/np.savez would append a suffix
        write(f)


def _writes(method):
    """A write of the store: a failure to write (disk full, also from a Rust writer) becomes one line
    saying what the run leaves (:meth:`RunStore.failed`)."""
    @functools.wraps(method)
    def wrapper(self: "RunStore", *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:
            if not is_write_failure(exc, self.path):
                raise
            raise self.failed(exc) from None

    return wrapper


class RunStore:
    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        #: the folder was new or empty when the run began (a failed new run removes what it wrote)
        self.new = False

    @classmethod
    def open(cls, out: str | os.PathLike, *, resume: bool, inputs=(),
             held: contextlib.ExitStack | None = None) -> "RunStore":
        """Check (and with ``resume`` reopen) the folder ``out``: it must follow the output rules
        (steerformer.outputs; ``inputs``: the checkpoint folders read) and be new, empty or a
        collapse run. Nothing is created before the run writes its description
        (:meth:`write_run`), so a run refused before that leaves nothing behind. ``held``: the
        folder's writer lock is entered into it (held until the caller closes it, the whole run)
        and the rules checked again under it: a second run writing the same folder is one line."""
        path = Path(out).expanduser()
        target = check_output_folder(out, COLLAPSE, inputs=inputs, name="out", incremental=True)
        if held is not None:
            held.enter_context(writer_lock(target, "out", str(out), wait=False))
            check_output_folder(out, COLLAPSE, inputs=inputs, name="out", incremental=True)
        store = cls(path)
        store.new = not resume and not (path.is_dir() and any(path.iterdir()))
        if not resume and store.completed_passes() > 0:
            raise bad_argument("out", str(out), "an empty folder or resume=True — it already holds "
                               f"{store.completed_passes()} completed passes",
                               "Pass --resume to continue that run, or another --out folder.")
        if resume and not (path / RUN_FILE).is_file():
            raise bad_argument("out", str(out), "a folder written by an earlier collapse run (no run.json)",
                               "Drop --resume to start a new run there.")
        return store

    def failed(self, exc: BaseException) -> InvalidArgumentError:
        """The one-line error of a write that failed (disk full...), after cleaning up: a new run
        without a completed pass is removed (nothing left behind); otherwise the completed passes
        stay for ``resume``."""
        try:
            done = self.completed_passes()  # the passes a resume continues from
        except InvalidArgumentError:
            done = 0
        if self.new and done == 0:
            self.discard()
            left = "Nothing was left behind."
        else:
            left = (f"The {done} completed pass{'es are' if done != 1 else ' is'} kept in {self.path}: rerun with "
                    "--resume to continue.")
        return write_failed("out", self.path, exc, left)

    def discard(self) -> None:
        """Remove what this run wrote into its (new or empty) folder, and the folder if it is then empty."""
        for name in (RUN_FILE, PROMPTS_FILE, EMBED_FILE, STATE_FILE, *RESULT_FILES):
            (self.path / name).unlink(missing_ok=True)
        shutil.rmtree(self.path / PASS_DIR, ignore_errors=True)
        if self.path.is_dir() and not any(self.path.iterdir()):
            self.path.rmdir()

    @_writes
    def save_result(self, result: Any) -> None:
        """``result.save`` into the run folder, each file moved into place whole (collapse.json,
        .npz, .png; a DecodeResult's decode.json)."""
        tmp = self.path / f".result.tmp-{os.getpid()}"
        try:
            for f in result.save(tmp).values():
                os.replace(f, self.path / f.name)
        except Exception as exc:  # a writer cut by the size limit, in its own words: said plainly
            plain = in_plain_words(exc, tmp)
            if plain is not exc:
                raise plain from exc
            raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    # ---- run description and prompts -------------------------------------------------------
    _info: dict | None = None
    _integrity: dict | None = None

    def _flush(self) -> None:
        info = {**(self._info or {}), "integrity": self._integrity}
        _atomic(self.path / RUN_FILE, lambda p: json_text(info, p))

    def _integrity_rec(self) -> dict:
        if self._integrity is None:
            self._integrity = {"format": 1, "prompts": None, "embedding": None, "passes": [], "states": []}
        return self._integrity

    @_writes
    def write_run(self, info: dict) -> None:
        (self.path / PASS_DIR).mkdir(parents=True, exist_ok=True)  # the run's first write
        self._info = {k: v for k, v in info.items() if k != "integrity"}
        self._integrity_rec()
        self._flush()

    def read_run(self) -> dict:
        try:
            info = read_json(self.path / RUN_FILE)
        except (OSError, FileFormatError) as exc:
            raise self.corrupt(RUN_FILE, f"cannot be read as JSON ({getattr(exc, 'reason', '') or type(exc).__name__})") \
                from None
        if not isinstance(info, dict) or not isinstance(info.get("options"), dict) or not isinstance(info.get("meta"), dict):
            raise self.corrupt(RUN_FILE, "lacks the options/meta of a collapse run")
        try:
            checked(info, CollapseRun, RUN_FILE)
        except FileFormatError as exc:
            raise self.corrupt(RUN_FILE, f"has a bad {exc.reason}") from None
        return info

    @_writes
    def write_prompts(self, ids: np.ndarray) -> None:
        _atomic(self.path / PROMPTS_FILE, lambda p: _to_file(p, lambda f: np.save(f, ids)))
        self._integrity_rec()["prompts"] = sha256_of(self.path / PROMPTS_FILE)
        self._flush()

    def read_prompts(self) -> np.ndarray:
        arr = self._load(PROMPTS_FILE, lambda f: np.load(f, allow_pickle=False))
        if not isinstance(arr, np.ndarray) or arr.ndim != 2 or arr.dtype.kind not in "iu":
            raise self.corrupt(PROMPTS_FILE, "is not a 2-D integer array of token ids")
        return arr

    @_writes
    def write_embedding(self, arrays: dict[str, np.ndarray]) -> None:
        _atomic(self.path / EMBED_FILE, lambda p: _to_file(p, lambda f: np.savez(f, **arrays)))
        self._integrity_rec()["embedding"] = sha256_of(self.path / EMBED_FILE)
        self._flush()

    def read_embedding(self) -> dict[str, np.ndarray]:
        return self._load(EMBED_FILE, _read_npz)

    # ---- checks -------------------------------------------------------------------------------
    def corrupt(self, name: str, why: str) -> CheckpointError:
        """The one-line error for a stored file ``name`` of this run that cannot be used (``why``)."""
        return CheckpointError(f"out={str(self.path)!r}: {name} {why}; the stored run cannot be resumed or read "
                               "as it is. Start a new run in another folder (or delete this one).")

    def _load(self, name: str, read):
        f = self.path / name
        if not f.is_file():
            raise self.corrupt(name, "is missing")
        try:
            return read(f)
        except Exception as exc:  # truncated zip, pickled object array, text renamed .npy ...
            raise self.corrupt(name, f"is corrupt ({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''})") from None

    def verify(self, *, prompts: int | None = None, length: int | None = None, dtype: str | None = None) -> int:
        """Check every stored piece a resume reads against the hashes of ``run.json`` and return the
        number of completed passes (0 without a state). Raises CheckpointError naming the first
        mismatch. Also keeps the hash lists so the run can go on."""
        info = self.read_run()
        rec = info.get("integrity")
        if not isinstance(rec, dict) or rec.get("format") != 1:
            raise CheckpointError(
                f"out={str(self.path)!r}: cannot verify this stored run — its {RUN_FILE} records no file hashes "
                "(written by an older steerformer, or edited). Resuming could continue from wrong numbers, so it "
                "is refused: start a new run in another folder.")
        passes, states = rec.get("passes"), rec.get("states")
        if not (isinstance(passes, list) and isinstance(states, list)):
            raise self.corrupt(RUN_FILE, "has a malformed integrity record")
        for name, key in ((PROMPTS_FILE, "prompts"), (EMBED_FILE, "embedding")):
            if rec.get(key) is not None:
                self._check_hash(name, rec[key])
        completed = 0
        state_file = self.path / STATE_FILE
        if state_file.exists():
            got = sha256_of(state_file)
            matches = [i for i, h in enumerate(states) if h == got]
            if not matches:
                raise self.corrupt(STATE_FILE, "does not match the state recorded after any pass in "
                                    f"{RUN_FILE} (sha256 {got[:12]}…)")
            completed = matches[-1] + 1
            state = self._load(STATE_FILE, lambda f: torch.load(f, map_location="cpu", weights_only=True))
            if not isinstance(state, dict) or state.get("completed") != completed or \
                    not isinstance(state.get("hidden"), torch.Tensor):
                raise self.corrupt(STATE_FILE, f"does not hold the state after pass {completed}")
            shape, h = rec.get("state_shape"), state["hidden"]
            if shape is not None and list(h.shape) != list(shape):
                raise self.corrupt(STATE_FILE, f"holds hidden states of shape {tuple(h.shape)}, not {tuple(shape)}")
            if prompts is not None and tuple(h.shape[:2]) != (prompts, length):
                raise self.corrupt(STATE_FILE, f"holds hidden states for {tuple(h.shape[:2])} prompts × tokens, "
                                    f"not {(prompts, length)}")
            if dtype is not None and str(h.dtype).removeprefix("torch.") != dtype:
                raise self.corrupt(STATE_FILE, f"holds {h.dtype} states, the run is {dtype}")
            if len(passes) < completed:
                raise self.corrupt(RUN_FILE, f"lists {len(passes)} pass files but the state is after pass {completed}")
            for i in range(completed):
                self._check_hash(f"{PASS_DIR}/{self.pass_file(i).name}", passes[i])
        self._info = {k: v for k, v in info.items() if k != "integrity"}
        self._integrity = {**rec, "passes": passes[:completed], "states": states[:completed]}
        return completed

    def _check_hash(self, name: str, want: str) -> None:
        f = self.path / name
        if not f.is_file():
            raise self.corrupt(name, "is missing")
        got = sha256_of(f)
        if got != want:
            raise self.corrupt(name, f"was changed after it was written (sha256 {got[:12]}…, recorded {str(want)[:12]}…)")

    # ---- passes ------------------------------------------------------------------------------
    def pass_file(self, index: int) -> Path:
        return self.path / PASS_DIR / f"pass_{index + 1:06d}.npz"

    @_writes
    def append_pass(self, index: int, arrays: dict[str, np.ndarray]) -> None:
        _atomic(self.pass_file(index), lambda p: _to_file(p, lambda f: np.savez(f, **arrays)))
        rec = self._integrity_rec()
        rec["passes"] = rec["passes"][:index] + [sha256_of(self.pass_file(index))]
        self._flush()

    def read_passes(self, count: int) -> dict[str, np.ndarray]:
        """The arrays of passes 0..count-1 stacked along a new first axis."""
        rows: dict[str, list] = {}
        for i in range(count):
            for k, v in self._load(f"{PASS_DIR}/{self.pass_file(i).name}", _read_npz).items():
                rows.setdefault(k, []).append(v)
        try:
            return {k: np.stack(v) for k, v in rows.items()}
        except ValueError:
            raise self.corrupt(PASS_DIR, "holds pass files of different shapes") from None

    @_writes
    def save_state(self, completed: int, hidden: torch.Tensor, extra: dict[str, Any] | None = None) -> None:
        blob = {"completed": int(completed), "hidden": hidden.detach().cpu(), **(extra or {})}

        def write(p: str) -> None:
            torch.save(blob, p)
            # run.json learns the new state's hash before the state is moved into place
            rec = self._integrity_rec()
            rec["states"] = rec["states"][:completed - 1] + [sha256_of(Path(p))]
            rec["state_shape"], rec["state_dtype"] = list(hidden.shape), str(hidden.dtype).removeprefix("torch.")
            self._flush()

        _atomic(self.path / STATE_FILE, write)

    def load_state(self) -> dict[str, Any] | None:
        f = self.path / STATE_FILE
        return torch.load(f, map_location="cpu", weights_only=True) if f.is_file() else None

    def completed_passes(self) -> int:
        state = self.path / STATE_FILE
        if not state.is_file():
            return 0
        try:
            return int(torch.load(state, map_location="cpu", weights_only=True)["completed"])
        except Exception as exc:  # a truncated file from a killed writer cannot happen (atomic), but say so
            raise InvalidArgumentError(f"out={str(self.path)!r}: {STATE_FILE} cannot be read "
                                       f"({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else 'empty'}); "
                                       "remove it to restart the run from scratch") from None


def _read_npz(f: Path) -> dict[str, np.ndarray]:
    with np.load(f, allow_pickle=False) as z:
        out = {k: z[k] for k in z.files}
    if any(v.dtype.kind not in "biuf" for v in out.values()):
        raise ValueError("holds non-numeric arrays")
    return out


def save_into_run(result: Any, out: str | os.PathLike) -> None:
    """Write ``result``'s files (a DecodeResult's decode.json...) into the collapse run folder
    ``out``, each moved into place whole; a full disk is one line, the run's passes kept."""
    RunStore(out).save_result(result)
