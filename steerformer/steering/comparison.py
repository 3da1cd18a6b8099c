"""The comparison ``steerformer evaluate`` runs: the default steer beside activation-addition hooks
over layers × coefficients, judged on the same held-out answers (``evaluate.evaluate_steering``).
The layers default to the model's own middle layers (the addition's scan layers), not to one
model's numbers."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from ..matrices import select_layers
from .activation import activation_steering
from .evaluation.evaluate import HELDOUT_QUESTIONS, evaluate_steering


def steer_and_hooks(model: Any, tokenizer: Any, token: str, *, layers: Sequence[int] | None = None,
                    coeffs: Sequence[float] = (0.15, 0.25), max_kl: float | None = None, questions: int = 8,
                    max_new_tokens: int = 40, chat: bool = True, sample: bool = False, seed: int = 0,
                    judge: Any = None, say: Callable[[str], None] = lambda line: None) -> Any:
    """A :class:`~.evaluate.SteeringEvaluation` of the default steer (``max_kl`` its budget) and of a
    run-time activation-addition hook at each layer of ``layers`` (default: the addition's scan
    layers of this model) for each coefficient of ``coeffs`` (in residual norms), on the first
    ``questions`` held-out questions. ``say``: one line per phase."""
    from ..loading import open_source
    from .methods.addition.calibrate import addition_vectors, default_scan_layers
    from .steer import steered

    n_layers = open_source(model).adapter.n_layers
    hook_layers = select_layers(list(layers), n_layers, name="layers") if layers is not None \
        else default_scan_layers(n_layers)
    steer_kw = {} if max_kl is None else {"max_kl": max_kl}
    methods: dict = {"steer (default)": lambda s: steered(model, token=token, tokenizer=tokenizer, **steer_kw)}
    strengths: dict = {"steer (default)": [None]}
    for k, v in addition_vectors(model, tokenizer, token, hook_layers).items():
        methods[f"hook, layer {k}"] = (lambda vec: lambda c: activation_steering(
            model, vec, coeff=c, positions="skip-first"))({k: v})
        strengths[f"hook, layer {k}"] = list(coeffs)
    say(f"answering {questions} held-out questions ({max_new_tokens} tokens each) with the base model, then "
        f"{sum(len(v) for v in strengths.values())} steered variants ...")
    methods = {label: _announced(label, make, say) for label, make in methods.items()}
    return evaluate_steering(model, tokenizer, methods, strengths, concept=token, questions=HELDOUT_QUESTIONS[:questions],
                             chat=chat, max_new_tokens=max_new_tokens, sample=sample, seed=seed, judge=judge)


def _announced(label: str, make: Callable, say: Callable[[str], None]) -> Callable:
    """``make`` (strength -> context manager), saying which variant is answering."""
    def run(strength):
        say(f"  {label}" + ("" if strength is None else f", coefficient {strength:g}") + " ...")
        return make(strength)

    return run
