"""What collapse does to text: greedy continuation of a prompt by the model looped k times
(the arXiv version's decoding experiment). Every new token reruns the k passes over the whole
sequence, as the reference code does (no key/value cache: the loop has no fixed depth to cache)."""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any, Sequence

import torch

from ..consistency import MissingHeadError
from ..errors import InvalidArgumentError, bad_argument
from ..loading import is_pretrained_model, load_model, open_source
from ..results import JsonResult, read_json
from .loop import LoopedModel

log = logging.getLogger(__name__)


@dataclasses.dataclass
class DecodeResult(JsonResult):
    """``continuations[k]``: the new token ids after looping ``k`` times; ``texts[k]`` their
    decoding (None without a tokenizer). Speaks the result protocol (:mod:`steerformer.results`);
    it has no figure."""

    prompt_ids: list[int]
    prompt_text: str | None
    continuations: dict[int, list[int]]
    texts: dict[int, str | None]
    options: dict

    def lines(self) -> list[str]:
        head = self.prompt_text if self.prompt_text is not None else str(self.prompt_ids)
        out = [f"prompt: {head!r}"]
        for k, ids in self.continuations.items():
            shown = self.texts[k] if self.texts[k] is not None else str(ids)
            out.append(f"{k:>5} pass{'es' if k != 1 else '  '}: {shown!r}")
        return out

    def summary(self) -> str:
        """The prompt, then one line per loop count with its continuation."""
        return "\n".join(self.lines())

    def to_dict(self) -> dict:
        return {"prompt_ids": self.prompt_ids, "prompt_text": self.prompt_text, "options": self.options,
                "continuations": {str(k): v for k, v in self.continuations.items()},
                "texts": {str(k): v for k, v in self.texts.items()}}

    @classmethod
    def from_dict(cls, doc: dict) -> "DecodeResult":
        """Rebuild from :meth:`to_dict` data (loop counts back to ints)."""
        return cls(prompt_ids=[int(i) for i in doc["prompt_ids"]], prompt_text=doc["prompt_text"],
                   continuations={int(k): [int(i) for i in v] for k, v in doc["continuations"].items()},
                   texts={int(k): v for k, v in doc["texts"].items()}, options=doc["options"])

    def save(self, out_dir: str | os.PathLike, *, plots: bool = True) -> dict[str, Path]:
        """``decode.json`` in folder ``out_dir``."""
        path = Path(out_dir) / "decode.json"
        self.to_json(path)
        return {"json": path}

    @classmethod
    def load(cls, out_dir: str | os.PathLike) -> "DecodeResult":
        """The result :meth:`save` wrote (a folder, or the JSON file itself)."""
        path = Path(out_dir)
        return cls.from_dict(read_json(path / "decode.json" if path.is_dir() else path))

    def plot(self, out_dir: str | os.PathLike) -> list[Path]:
        """No figure for a decoding run: returns an empty list."""
        return []


#: The loop counts of the arXiv version's decoding experiment.
PAPER_DECODE_PASSES = (1, 5, 10, 100)


def decode_loop_counts(passes: int, decode_passes: Sequence[int] | None = None) -> list[int]:
    """Loop counts for the decoding that follows a collapse run of ``passes`` passes, none above it:
    ``decode_passes`` as given (a count above ``passes`` is refused), or by default
    :data:`PAPER_DECODE_PASSES` up to ``passes`` and ``passes`` itself — so ``--passes 20``
    decodes after 1, 5, 10 and 20 passes, never 100 (each new token reruns k passes)."""
    if decode_passes is None:
        return sorted({k for k in PAPER_DECODE_PASSES if k <= passes} | {passes})
    too_many = [k for k in decode_passes if k > passes]
    if too_many:
        raise bad_argument("decode_passes", ",".join(map(str, decode_passes)), f"loop counts up to passes ({passes})",
                           f"Drop {','.join(map(str, too_many))}, or raise passes.")
    return list(decode_passes)


def greedy_decode(model: Any, prompt_ids: Sequence[int], *, passes: Sequence[int] = PAPER_DECODE_PASSES,
                  new_tokens: int = 20, ffn: bool = True, tokenizer: Any = None) -> DecodeResult:
    """Greedy continuation of ``prompt_ids`` by ``model`` (with an LM head) looped ``k`` times for
    each ``k`` in ``passes``; after one pass this is the model's own greedy decoding."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    looped = LoopedModel(model, ffn=ffn)
    if head is None or looped.adapter.mask(0).kind == "full":
        raise InvalidArgumentError(f"greedy decoding needs a causal language model with its LM head; got "
                                   f"{type(model).__name__}. Load it with AutoModelForCausalLM.")
    if not passes or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in passes):
        raise bad_argument("passes", list(passes), "positive integers (how many times the model is looped)")
    if isinstance(new_tokens, bool) or not isinstance(new_tokens, int) or new_tokens < 1:
        raise bad_argument("new_tokens", new_tokens, "a positive integer")
    prompt = [int(i) for i in prompt_ids]
    if not prompt:
        raise bad_argument("prompt_ids", prompt, "at least one token id")
    limit = looped.adapter.max_positions
    if limit is not None and len(prompt) + new_tokens > limit:
        raise bad_argument("new_tokens", new_tokens, f"at most {limit - len(prompt)}: the prompt has {len(prompt)} "
                           f"tokens and the model embeds {limit} positions")
    dev = next(model.parameters()).device
    conts: dict[int, list[int]] = {}
    with torch.no_grad():
        for k in passes:
            seq = torch.tensor([prompt], device=dev)
            for _ in range(new_tokens):
                h = looped.embed(seq)
                for _ in range(k):
                    h = looped.run_pass(h)
                nxt = head(h[:, -1]).argmax(-1, keepdim=True)
                seq = torch.cat([seq, nxt], dim=1)
            conts[int(k)] = seq[0, len(prompt):].tolist()
    dec = (lambda ids: tokenizer.decode(ids)) if tokenizer is not None else (lambda ids: None)
    return DecodeResult(prompt_ids=prompt, prompt_text=dec(prompt), continuations=conts,
                        texts={k: dec(v) for k, v in conts.items()},
                        options={"passes": [int(k) for k in passes], "new_tokens": new_tokens, "ffn": ffn})


def load_causal_lm(model: Any, *, dtype: torch.dtype | None = None, device: Any = None):
    """The model with its causal LM head, or None when the checkpoint has no such head class."""
    if open_source(model).adapter.mask(0).kind == "full":
        return None  # an encoder: its LM head (if any) does not continue text
    if is_pretrained_model(model):
        return model if model.get_output_embeddings() is not None else None
    try:
        return load_model(model, dtype=dtype, device=device, auto_class="AutoModelForCausalLM")
    except ValueError:  # e.g. a BERT checkpoint: AutoModelForCausalLM has no mapping / not a decoder
        return None
    except MissingHeadError as exc:  # a base model saved without its LM head: nothing to decode with
        log.warning("no greedy decoding: the checkpoint has no LM head weights (%s)", ", ".join(exc.keys))
        return None
