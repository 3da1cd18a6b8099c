"""``steer``, ``steered``: choose a steering method (``steering/methods/``, the default in
:func:`~.methods.choose_method`), build its options (its config checks them), open the model once and
run the one lifecycle, plan → apply → measure → record (``steering/lifecycle.py``). Nothing else.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

import torch

from ..configs import Config
from . import lifecycle
from .chain import steering_of, unsteer
from .common import model_object
from .record import SteeringRecord


def steer(model: Any, direction: Any = None, config: Config | None = None, *, token: str | None = None,
          eigvec: int | None = None, text: str | None = None, left: Any = None,
          prompts: Sequence[str] | torch.Tensor | None = None,
          heldout_prompts: Sequence[str] | torch.Tensor | None = None, tokenizer: Any = None,
          layers: Sequence[int] | int | None = None, method: str | None = None, **options: Any) -> SteeringRecord:
    """Steer ``model`` (edited in place) toward a direction; returns the :class:`SteeringRecord`.

    ``method``: "addition", "paper", "ablation" or any registered name (``steering/methods/``).
    By default **a causal LM** gets ``addition``: activation addition written as weights after the
    layer(s) ``layer``/``layers`` (default: a scan of middle layers), along the direction taken at
    that layer (``token``/``text``: a word or phrase, by the templated contrast of ``calibrate.py``),
    with the largest gain whose teacher-forced KL on probe prompts stays within ``max_kl`` (default
    0.5 nats/token: the rule chosen on rated answers, docs/steering-chat.md); ``positions="skip-first"``
    leaves the first token alone.
    **Every other model**, or any of ``gain``, ``strength``, ``target_alignment``, ``through_ffn``,
    ``solve``... gets ``paper``: W_O' = W_O + γ u (wᵀV⁺) of one layer (``layer``, default -1).

    Direction: ``direction`` (array/tensor or ``.npy`` path), ``token`` (a word, read where the method
    writes: the paper's unembedding row, else input embedding row; the addition's templated contrast),
    ``eigvec`` (an eigenvector of F_layer, by real part) or ``text`` (mean final hidden state).

    Gain γ: ``gain`` (absolute; negative steers away), ``strength`` (γ = strength·|λ1(F_layer)|), or
    else the smallest gain reaching ``target_alignment`` in ``measure`` ("model": mean |cos(h, u)|
    of the real model's final states on ``prompts``; "dynamics": ρ(x(L+1), u) in the controlled
    dynamics); an unreachable target stops at the best and says so in ``record.message``.
    ``solve``: "exact" (a = wᵀV⁻¹, least squares when V is singular) or "min-norm" (ridge fit of a
    on the states entering the layer). ``through_ffn``: solve for the pre-FFN direction so the final
    states align with u. ``untie_last`` (ALBERT): give the last layer its own weights first.
    ``compensate_bias``: remove the edit's shift γ (a·b_V) u of every token through b_O. ``left``: w.
    ``report=False`` skips the measurements the edit does not need; ``progress``: tqdm bars.

    ``method="ablation"`` (or any of its options, e.g. ``scale``): remove u from the write of every layer in
    ``layers`` (default all), W' = (I − scale·uuᵀ) W (see :func:`ablate`). A steered model steered
    again appends to its chain (``steering_of(model)``); ``unsteer`` undoes all of it or the last k
    calls. A ``SentenceTransformer`` is steered through its transformer.

    The call's own options come as a :class:`~steerformer.configs.SteerConfig` or by keyword
    (``method``, ``layer``, ``report=True``, ``progress``); a method's options as its config
    (``config=PaperConfig(...)``) or by keyword (the addition's ``max_kl``,
    ``positions="skip-first"``; the paper's ``target_alignment (0.99), strength, gain, solve="min-norm",
    measure="model", through_ffn, untie_last, compensate_bias, min_state_cosine, dynamics_n_prompts=30,
    dynamics_tokens=10, seed=0``; the ablation's ``scale=1.0, writers, bias, norm_preserving``). The
    record stores them (``record.config``).
    """
    return lifecycle.dispatch(model, direction, config, method, options, "steer", token=token, eigvec=eigvec, text=text,
                    left=left, prompts=prompts, heldout_prompts=heldout_prompts, tokenizer=tokenizer, layers=layers)


@contextlib.contextmanager
def steered(model: Any, direction: Any = None, **kwargs: Any) -> Iterator[SteeringRecord]:
    """``with steered(model, direction, gain=…) as rec:`` — :func:`steer` on entry (same arguments),
    and on exit, also on an exception, the edit is removed bit for bit (with any edit made after it
    inside the block). Edits made before the block stay."""
    rec = steer(model, direction, **kwargs)
    target = model_object(model, "steered")
    try:
        yield rec
    finally:
        steering = steering_of(target)
        if steering is not None:
            index = next((i for i, r in enumerate(steering.records) if r is rec), None)
            if index is not None:
                unsteer(target, last=len(steering.records) - index)
