"""Where the target direction u comes from: an array, a ``.npy`` file, a token, an eigenvector of
F_L, or the mean final hidden state of a text. Every source ends as a finite unit float64 vector
of the model's width, and says what it was (``DirectionSource``)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import bad_argument


@dataclasses.dataclass
class DirectionSource:
    kind: str  # "array", "npy", "token", "eigvec", "text"
    detail: dict

    def to_dict(self) -> dict:
        return {"kind": self.kind, **self.detail}


def vector_hash(v: torch.Tensor) -> str:
    """sha256 of the float64 little-endian bytes: the identity of a direction in records."""
    return hashlib.sha256(np.ascontiguousarray(v.detach().cpu().numpy().astype("<f8")).tobytes()).hexdigest()


def check_vector(value: Any, d: int, *, name: str = "direction", model_name: str = "the model") -> torch.Tensor:
    """A finite, non-zero vector of length ``d``, returned unit-norm in float64."""
    try:
        arr = value.detach().cpu().to(torch.float64).numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
    except Exception:  # ragged nested lists
        raise bad_argument(name, value, f"a numeric vector of {d} entries") from None
    if arr.dtype.kind == "c":
        raise bad_argument(name, f"array of dtype {arr.dtype}", f"a real vector of {d} entries",
                           "A direction in the residual stream is real; pass e.g. v.real if that is what you mean.")
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise bad_argument(name, f"array of dtype {arr.dtype}", f"a numeric vector of {d} entries",
                           "Ragged lists and strings cannot be directions.")
    arr = arr.astype(np.float64).reshape(-1) if arr.ndim == 2 and 1 in arr.shape else arr.astype(np.float64)
    if arr.ndim != 1 or arr.shape[0] != d:
        raise bad_argument(name, f"array of shape {arr.shape}",
                           f"a vector of {d} entries: {name} has {arr.size if arr.ndim else 0} entries but "
                           f"{model_name} has d_model={d}")
    if not np.isfinite(arr).all():
        raise bad_argument(name, f"a vector with {int((~np.isfinite(arr)).sum())} NaN/inf entries", "a finite vector")
    if not arr.any():
        raise bad_argument(name, "the zero vector", "a non-zero vector (only its direction is used)")
    with np.errstate(over="ignore", under="ignore"):
        n = np.linalg.norm(arr)
    if not np.isfinite(n) or n < 1e-150:
        # The norm overflows (entries ~1e308) or loses precision: scale by max |x| first. Only
        # here, so ordinary vectors keep their exact bytes.
        arr = arr / np.abs(arr).max()
        n = np.linalg.norm(arr)
    return torch.from_numpy(arr / n)


def load_npy(path: str | os.PathLike, d: int, *, name: str = "direction", model_name: str = "the model") -> torch.Tensor:
    p = Path(path)
    if not p.is_file():
        raise bad_argument(name, str(path), "an existing .npy file or an array")
    with open(p, "rb") as f:
        magic = f.read(6)
    if magic[:4] == b"PK\x03\x04":
        raise bad_argument(name, str(path), "a .npy file holding one vector (this is an .npz archive)",
                           "Extract the array: np.save('u.npy', np.load(path)['name']).")
    if magic != b"\x93NUMPY":
        raise bad_argument(name, str(path), "a .npy file written by np.save (this file does not start with the "
                           ".npy magic bytes: a text or other file renamed .npy?)",
                           "Save the vector with np.save(path, np.asarray(v, dtype=float)).")
    try:
        arr = np.load(p, allow_pickle=False)
    except ValueError as exc:  # object arrays (ragged lists) need pickle: refused
        raise bad_argument(name, str(path), f"a numeric .npy vector of {d} entries ({exc})",
                           "Save a float array with np.save(path, np.asarray(v, dtype=float)).") from None
    except Exception as exc:
        raise bad_argument(name, str(path), f"a readable .npy file ({type(exc).__name__}: {exc})") from None
    return check_vector(arr, d, name=f"{name} ({p.name})", model_name=model_name)


def token_direction(model: Any, tokenizer: Any, token: str, d: int) -> tuple[torch.Tensor, dict]:
    """The embedding row of ``token``: the *unembedding* (output embedding) row when the model has
    an LM head — the direction that raises that token's logit — else the input embedding row.

    A string that tokenizes into several pieces is refused (documented choice: averaging pieces
    would steer toward none of them); the error lists the pieces."""
    if tokenizer is None:
        raise bad_argument("token", token, "a model whose tokenizer is known", "Pass tokenizer=... .")
    ids = tokenizer(token, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        pieces = tokenizer.convert_ids_to_tokens(ids)
        raise bad_argument("token", token, f"a string that is one token; it splits into {len(ids)} pieces {pieces}",
                           "Pick one of the pieces, or use text=... for the mean state of a phrase.")
    head = model.get_output_embeddings() if getattr(model, "base_model", model) is not model else None
    table, which = (head.weight, "unembedding") if head is not None else (model.get_input_embeddings().weight, "input-embedding")
    row = table[ids[0]].detach()
    if row.shape[0] != d:
        raise bad_argument("token", token, f"an embedding of width d_model={d}; the {which} has width {row.shape[0]}",
                           "Give the direction as an array instead.")
    return check_vector(row, d, name="token"), {"token": token, "token_id": int(ids[0]), "row": which}


def eigvec_direction(F: torch.Tensor | None, k: int, *,
                     factors: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, dict]:
    """The k-th right eigenvector of F (sorted by real part, descending); its real part when complex.

    ``factors`` (A, B) with F = A·B: when the layer's rank r < d the eigenvectors are those of the
    nonzero spectrum (the r × r problem, MATH.md §1b), numbered exactly as ``analyze`` reports them —
    the d − r null-space directions of F are rounding noise and never a steering target."""
    from ..spectra import layer_spectrum

    vals, vecs, _ = layer_spectrum(F, factors=factors)
    d, m = vecs.shape
    if not isinstance(k, (int, np.integer)) or not 0 <= k < m:
        raise bad_argument("eigvec", k, f"an eigenvector index in [0, {m - 1}] (0 = principal, by real part"
                           + (f"; the layer has rank {m} < d = {d}" if m < d else "") + ")")
    v = vecs[:, int(k)]
    is_complex = bool(v.imag.abs().max() > 1e-12) if v.is_complex() else False
    return check_vector(v.real if v.is_complex() else v, d, name="eigvec"), {
        "index": int(k), "eigenvalue": [float(vals[k].real), float(vals[k].imag)],
        "part": "real part of a complex eigenvector" if is_complex else "real eigenvector"}


def text_direction(model: Any, tokenizer: Any, text: str, d: int) -> tuple[torch.Tensor, dict]:
    """Mean final hidden state over the tokens of ``text`` (the unedited model's)."""
    if tokenizer is None:
        raise bad_argument("text", text, "a model whose tokenizer is known", "Pass tokenizer=... .")
    if not isinstance(text, str) or not text.strip():
        raise bad_argument("text", text, "a non-empty string")
    enc = tokenizer([text], return_tensors="pt")
    base = getattr(model, "base_model", model)
    dev = next((p.device for p in base.parameters() if p.device.type != "meta"), None)
    enc = {k: v.to(dev) for k, v in enc.items()} if dev is not None else enc
    with torch.no_grad():
        h = base(**enc).last_hidden_state[0]
    return check_vector(h.mean(0), d, name="text"), {"text": text, "n_tokens": int(h.shape[0])}
