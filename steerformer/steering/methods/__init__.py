"""Steering methods, one folder each, registered by name: ``sf.steer(model, method=NAME)`` and
``steerformer steer --method NAME`` run one; without a name, :func:`choose_method` picks it (the
one place the default is stated: the method whose options are given, else ``addition`` for a causal
LM and ``paper`` for every other model).

    paper     the papers' rank-1 edit of an attention layer's output matrix, W_O' = W_O + γ u (wᵀV⁺)
    addition  activation addition written as weights, its gain the largest within a KL budget
    ablation  directional ablation of the residual-stream writers, W' = (I − s UUᵀ) W

Contrastive prompts are not a method but a **direction source** (``steering/sources.py``:
``contrastive_direction``): they say *where u comes from* — the difference of the mean activations
of two prompt sets — and any method can write, add or remove that u; the CLI's ``--positive``/
``--negative``/``--pairs`` hand it to whichever method runs.

The contract of a method (PEFT's tuners: a method is a folder, or for a small one a file, and one
registration; nothing outside it names the method)::

    from steerformer.steering import Edit
    from steerformer.steering.lifecycle import Plan
    from steerformer.steering.methods import Method, register_method

    @register_method("toy")                  # or register_method("toy", Toy): one call
    class Toy(Method):
        def plan(self, call, cfg) -> Plan:   # what to edit, with what gain; changes nothing
            ...                              # call.model/.source/.adapter/.tokenizer/.head/.direction/
            return Plan(edits=[Edit(...)])   # .token/.text/.eigvec/.layers/.prompts/.config

* ``plan(call, cfg)``: a :class:`~steerformer.steering.lifecycle.Plan` — the edits as values
  (:class:`~steerformer.steering.edit.Edit`: module, layer, slot, u, a, gain; every other field
  optional, ``kind`` included), and optionally where u came from (``direction_source``: a
  JSON-able dict, default ``{}``) and what the record shows (``direction``: what was asked for,
  ``target``: what the held-out alignment is measured against, ``message``: how the gain was
  chosen, ``details``: the method's own record fields, an instance of its ``details`` dataclass,
  ``heldout_layer``: where the held-out probe starts, None for no held-out measurement). It must not change the model; it raises ``bad_argument`` naming
  the option for bad input. ``call.config`` is the call's
  :class:`~steerformer.configs.SteerConfig` (``method``, ``layer``, ``report``, ``progress``).
* ``config`` (optional): the method's options, a dataclass subclassing
  :class:`steerformer.configs.Config` (a :class:`~steerformer.configs.MethodConfig` to declare
  rules in ``check`` and the call options it ``refuses``), fields made with ``option(...)``.
  ``sf.steer(model, method="toy", coeff=2.0)`` (or ``config=ToyConfig(...)``) builds it from the
  keywords that are not SteerConfig fields and passes it as ``cfg``; without one, ``cfg`` is an
  empty :class:`~.registry.NoOptions`.
* ``details`` (optional): a :class:`~steerformer.steering.record.Details` dataclass of what the
  method's records add to the core every record has (``record.details``; saved, reloaded and
  checked field by field with the record).
* Words and ``measure`` (optional, generic by default): ``summary_lines``, ``card_formula``, ``gain_text``,
  ``facts``, ``report_section``, ``plot``, ``alignment_target``, ``phase_line`` and ``measure(call, plan,
  held)`` (which may complete ``plan.details``), each documented on :class:`Method`.
* A built-in method is a folder ``<name>/`` with ``config.py`` (its options, importable without torch:
  ``steer --help`` makes them flags, and an option of one method chooses it), ``method.py`` (the
  plan, the words, the registration) and its helpers, plus one ``BUILT_IN`` entry in
  ``steering/registry.py``. A method registered from elsewhere runs on the command line with ``--method NAME``
  and its config's defaults.
* Everything else — applying the edits bit-exactly with rollback, the record, the chain, save,
  reload, ``unsteer``, ``verify``, the exports — is the one lifecycle (``steering/lifecycle.py``)
  and needs nothing from the method.
"""

from ..registry import (
    Method, NoOptions, built_in_configs, call_options, choose_method, config_of, get_method, method_config, method_names,
    method_of, register_method,
)
# the built-in methods (paper, addition, ablation) register on first use of their name
# (registry.BUILT_IN), so that a call imports the one method it runs; this package imports no torch

__all__ = ["Method", "NoOptions", "built_in_configs", "call_options", "choose_method", "config_of", "get_method",
           "method_config", "method_names", "method_of", "register_method"]
