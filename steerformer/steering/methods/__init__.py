"""Steering methods, one module each, registered by name: ``sf.steer(model, method=NAME)`` and
``steerformer steer --method NAME`` run one; without a name, :func:`choose_method` picks it (the
one place the default is stated: the method whose options are given, else ``addition`` for a causal
LM and ``paper`` for every other model).

    paper     the papers' rank-1 edit of an attention layer's output matrix, W_O' = W_O + γ u (wᵀV⁺)
    addition  activation addition written as weights, its gain the largest within a KL budget
    ablation  directional ablation of the residual-stream writers, W' = (I − s UUᵀ) W
    distilled a low-rank edit of residual writers trained so that the unprompted model imitates the
              same model told the concept (Prompt Baking's KL / PSR's states; a folder: distilled/)

Contrastive prompts are not a method but a **direction source** (``steering/sources.py``:
``contrastive_direction``): they say *where u comes from* — the difference of the mean activations
of two prompt sets — and any method can write, add or remove that u; the CLI's ``--positive``/
``--negative``/``--pairs`` hand it to whichever method runs.

The contract of a method (a new method is exactly one new file here plus its registration)::

    import dataclasses
    from steerformer.configs import Config, option
    from steerformer.steering.lifecycle import Plan
    from steerformer.steering.methods import Method, register_method

    @dataclasses.dataclass
    class ToyConfig(Config):                 # its options, declared once
        coeff: float = option(1.0, "How much of u to add.")
        def __post_init__(self):             # checked once, here (bad_argument naming the field)
            self.check_types()

    @register_method("toy")                  # or register_method("toy", Toy): one call
    class Toy(Method):
        config = ToyConfig
        def plan(self, call, cfg) -> Plan:   # what to edit, with what gain; changes nothing
            ...                              # call.model/.source/.adapter/.tokenizer/.head/.direction/
            return Plan(edits=[...],         # .token/.text/.eigvec/.layers/.prompts/.config
                        direction_source={...}, heldout_layer=layer)
        # optional: def measure(self, call, plan, held) -> dict of record fields (record.MEASURED)

* ``config``: a dataclass subclassing :class:`steerformer.configs.Config`, fields made with
  ``option(...)``, checked in ``__post_init__``. ``sf.steer(model, method="toy", coeff=2.0)`` (or
  ``config=ToyConfig(...)``) builds it from the keywords that are not
  :class:`~steerformer.configs.SteerConfig` fields. The built-in methods' configs (``PaperConfig``,
  ``AdditionConfig``, ``AblationConfig``) live in ``steerformer/configs.py`` — the CLI generates
  ``steer``'s flags from them without importing torch — and ``SteerConfig`` is their union plus the
  call's own options (``method``, ``layer``, ``report``, ``progress``); a built-in's plan receives
  that SteerConfig as its ``cfg``.
* Flags: ``steerformer steer`` generates its flags from ``SteerConfig``'s fields without importing
  torch, so a method's options become flags when its config is declared in ``steerformer/configs.py``
  as a :class:`~steerformer.configs.MethodConfig` (``method_name = "NAME"``, its rules in ``check``),
  added to ``METHOD_CONFIGS`` and to ``SteerConfig``'s bases; its options then also choose it (an
  option of one method selects that method; options of two are refused by name). A method
  registered from elsewhere runs on the command line (``--method NAME``) with its config's defaults.
* ``plan(call, cfg)``: a :class:`~steerformer.steering.lifecycle.Plan` — the edits as values
  (:class:`~steerformer.steering.edit.Edit`: module, layer, slot, u, a, gain, kind, ...), where u
  came from (``DirectionSource.to_dict()``, or any JSON-able dict), and what the record shows (a
  gain search as ``choice``, ``calibration``, ``message``, ``target``, ``heldout_layer``: where the
  held-out probe starts, None for no held-out measurement). It must not change the model; it raises
  ``bad_argument`` naming the option for bad input.
* ``measure(call, plan, held)`` (optional): record fields measured on the edited model (default: the
  held-out alignment with the target, the KL and the state cosine).
* Everything else — applying the edits bit-exactly with rollback, the record, the chain, save,
  reload, ``unsteer``, ``verify``, the PEFT export — is the one lifecycle
  (``steering/lifecycle.py``) and needs nothing from the method.
"""

from .registry import (
    Method, call_options, choose_method, get_method, method_config, method_names, register_method,
)
# the built-in methods (paper, addition, ablation, distilled) register on first use of their name
# (registry.BUILT_IN), so that a call imports the one method it runs

__all__ = ["Method", "call_options", "choose_method", "get_method", "method_config", "method_names", "register_method"]
