"""The full-model variant (Figs. 10/11, docs/math.md §3): the model's own hidden states on real prompts —
embeddings, FFN and the affine LayerNorm kept — so the same statistics can be compared with the
controlled dynamics. The states are exactly ``output_hidden_states`` (padding removed).

Note: pre-LN models (GPT-2, GPT-Neo, Llama...) return their last hidden state *after* the final norm; the statistics of
the last step therefore include that norm (recorded in ``options["last_state_after_final_norm"]``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

import torch

from ..errors import bad_argument
from ..loading import ModelSource, as_source, load_model, load_tokenizer
from ..prompts import DEFAULT_PROMPTS, PromptBatch


@dataclasses.dataclass
class HiddenStates:
    """The model's hidden states of real prompts, flattened over prompts.

    ``states[k]`` (N, d) is the input of execution layer k and ``states[k+1]`` its output; prompt p
    owns tokens ``sum(lengths[:p]) : sum(lengths[:p+1])``.
    """

    states: torch.Tensor  # (L + 1, N, d)
    lengths: list[int]
    layer_ids: list[int]
    prompts: list[str] | None
    options: dict


def read_prompts_file(path: str | Path) -> list[str]:
    """One prompt per non-blank line."""
    p = Path(path)
    if not p.is_file():
        raise bad_argument("prompts", str(path), "a text file with one prompt per line", "Check the path.")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        text = "\0"
    if "\0" in text:
        raise bad_argument("prompts", str(path), "a UTF-8 text file with one prompt per line (this file is binary)",
                           "Pass a plain text file.")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise bad_argument("prompts", str(path), "a file with at least one non-blank line (one prompt per line)",
                           "The file is empty; write prompts into it or omit --prompts for the built-in sentences.")
    return lines


def _tokenize(source: ModelSource, prompts: Sequence[str], tokenizer) -> list[list[int]]:
    tokenizer = load_tokenizer(source, tokenizer)
    if tokenizer is None:  # no tokenizer files: say how to go on without one
        raise bad_argument("prompts", f"text prompts for {source.model_id!r}", "a model that ships a tokenizer",
                           "Pass input_ids= (token ids per prompt) or tokenizer= instead.")
    ids = PromptBatch.from_texts(prompts, tokenizer).rows()
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    if special and all(i in special for seq in ids for i in seq):
        # transformers 5 builds an empty tokenizer for checkpoints without vocabulary files: every
        # word becomes <unk>, which would make "real prompts" meaningless.
        raise bad_argument("prompts", f"text prompts for {source.model_id!r}",
                           "a model whose tokenizer has a vocabulary (every word became a special/unknown token)",
                           "Pass input_ids= (token ids per prompt) or tokenizer= instead.")
    return ids


def _check_ids(ids: Any, vocab: int, max_pos: int | None) -> list[list[int]]:
    if isinstance(ids, torch.Tensor):
        ids = ids.tolist()
    if len(ids) == 0:
        raise bad_argument("input_ids", ids, "at least one prompt")
    out = []
    for p, seq in enumerate(ids):
        seq = [int(t) for t in seq]
        if not seq:
            raise bad_argument("prompts", f"prompt {p} (empty)", "prompts of at least one token")
        if max_pos is not None and len(seq) > max_pos:
            raise bad_argument("prompts", f"prompt {p} with {len(seq)} tokens",
                               f"at most {max_pos} tokens (the model's max_position_embeddings)",
                               "Shorten or split that prompt.")
        if min(seq) < 0 or max(seq) >= vocab:
            raise bad_argument("input_ids", f"prompt {p} has ids in [{min(seq)}, {max(seq)}]", f"ids in [0, {vocab - 1}]")
        out.append(seq)
    return out


def model_hidden_states(model: Any, prompts: Sequence[str] | str | Path | None = None, *, input_ids: Any = None,
                        tokenizer: Any = None, batch_size: int = 16, revision: str | None = None,
                        device: str | None = None) -> HiddenStates:
    """Hidden states of the model on ``prompts`` (a list of strings, a prompts file, or None for
    :data:`DEFAULT_PROMPTS`) or on ``input_ids`` (token ids per prompt, no tokenizer needed).
    ``device``: where a checkpoint is loaded to run (a model in memory runs where it is); the
    states come back on the CPU."""
    source = as_source(model, revision=revision)
    adapter = source.adapter
    cfg = source.config
    if not adapter.hidden_states_per_layer:
        raise bad_argument("model", f"{adapter.model_type} with inner_group_num={cfg.inner_group_num}",
                           "inner_group_num = 1: output_hidden_states gives one state per group call, not per layer")
    max_pos = getattr(cfg, "max_position_embeddings", None)
    texts = None
    if input_ids is None:
        texts = read_prompts_file(prompts) if isinstance(prompts, (str, Path)) else \
            list(DEFAULT_PROMPTS if prompts is None else prompts)
        if not texts:
            raise bad_argument("prompts", [], "at least one prompt")
        input_ids = _tokenize(source, texts, tokenizer)
    ids = _check_ids(input_ids, int(cfg.vocab_size), max_pos)
    net = source.model if source.model is not None else load_model(source.path, device=device)
    base = net.base_model
    pad = getattr(cfg, "pad_token_id", None) or 0
    chunks, lengths = [], [len(s) for s in ids]
    with torch.no_grad():
        for start in range(0, len(ids), batch_size):
            batch = ids[start:start + batch_size]
            # Right padding + attention mask: real tokens never see the pads and keep positions 0..n-1.
            inputs = PromptBatch.from_rows(batch, pad_id=pad).to(next(base.parameters()).device).inputs()
            out = base(**inputs, output_hidden_states=True)
            hs = torch.stack(out.hidden_states).to("cpu", torch.float64)  # (L+1, B, n, d)
            chunks.append(torch.cat([hs[:, i, :len(s)] for i, s in enumerate(batch)], dim=1))
    states = torch.cat(chunks, dim=1)
    if states.shape[0] != adapter.n_layers + 1:
        raise bad_argument("model", f"{states.shape[0]} hidden states",
                           f"{adapter.n_layers + 1} (one per layer plus the embeddings)")
    return HiddenStates(states=states, lengths=lengths, layer_ids=list(range(adapter.n_layers)), prompts=texts,
                        options={"variant": "full_model", "n_prompts": len(ids), "tokens_total": sum(lengths),
                                 "last_state_after_final_norm": adapter.final_norm_in_hidden_states})
