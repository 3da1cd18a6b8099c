"""The distilled method as a registered :class:`~steerformer.steering.methods.Method`: its plan
(teacher data → training → strength) and its own words (the record's summary lines, the card's
"chosen by", the edit's formula)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Sequence

from ....configs import select_layers
from ....errors import bad_argument
from ....prompts import REPORT_QUESTIONS, SELECTION_QUESTIONS
from ...lifecycle import Call, Plan
from ...record import Details
from ...registry import Method, register_method
from .config import DistilledConfig, default_layers
from .strength import choose_strength
from .teacher import data_sha256, read_questions, teacher_examples, training_questions
from .training import edit_writers, scaled, train_edit


def distilled_steering(model: Any, tokenizer: Any, concept: str, config: DistilledConfig | None = None, *,
                       layers: Sequence[int] | None = None, questions: Sequence[str] | None = None,
                       judge: Any = None, progress: Any = True) -> tuple[list, dict]:
    """The distilled edit of ``concept`` (package docstring): the teacher's answers to the training
    questions (``questions``, else ``config.questions``' file, else the TRAIN questions), the edit of
    ``layers`` (default :func:`~.config.default_layers`) trained, its strength chosen on the SELECTION
    questions (``judge``: a callable judge instead of ``config.select_judge``). Returns the edits at
    the chosen strength (not applied) and the record's information. Layers and writers are checked
    against the model before anything runs."""
    from ....loading import open_source
    from ...chat import pad_id
    from ...measure import model_device

    t0 = time.perf_counter()
    config = DistilledConfig() if config is None else config
    if not isinstance(concept, str) or not " ".join(concept.split()):
        raise bad_argument("token", concept, "the word or phrase to steer toward", "Pass token='ocean' "
                           "(CLI --token ocean).")
    concept = " ".join(concept.split())
    if tokenizer is None:
        raise bad_argument("tokenizer", None, "the model's tokenizer (the teacher answers text questions)")
    source = open_source(model)
    adapter = source.adapter
    n = adapter.n_layers
    layers = select_layers(list(layers) if layers is not None else list(default_layers(n)), n, name="layers")
    writers = edit_writers(adapter, sorted(layers), config.writer, source.model_id)  # before any hook is placed
    if questions is None and config.questions:
        questions = read_questions(config.questions)
    questions = training_questions(questions)
    examples = teacher_examples(model, tokenizer, questions, concept, config.instruction,
                                max_answer_tokens=config.max_answer_tokens, progress=progress)
    t_data = time.perf_counter() - t0
    edits, trained = train_edit(model, adapter, examples, layers=sorted(layers), writers=writers, rank=config.rank,
                                steps=config.steps, lr=config.lr, batch_size=config.batch_size,
                                kl_weight=config.kl_weight, objective=config.objective, seed=config.train_seed,
                                pad=pad_id(tokenizer), device=model_device(model), progress=progress)
    gain, rows = choose_strength(model, tokenizer, edits, concept, config.gains, kl_ceiling=config.kl_ceiling,
                                 judge=config.select_judge if judge is None else judge, progress=progress)
    history = trained.pop("history")
    info = {"concept": concept, "instruction": config.instruction, "objective": config.objective,
            "layers": sorted(layers), "writer": config.writer, "rank": config.rank, "steps": config.steps,
            "lr": config.lr, "batch_size": config.batch_size, "kl_weight": config.kl_weight,
            "max_answer_tokens": config.max_answer_tokens, "train_seed": config.train_seed,
            "data_sha256": data_sha256(examples), "n_examples": len(examples),
            "teacher_answers": [{"question": e.question, "answer": tokenizer.decode(e.answer, skip_special_tokens=True)}
                                for e in examples[:3]],
            "loss_first": history[0] if history else None, "loss_last": history[-1] if history else None,
            "selection": rows, "gain": gain, "kl_ceiling": config.kl_ceiling,
            "judge": config.select_judge if judge is None else getattr(judge, "name", type(judge).__name__),
            "split": {"train": list(questions), "selection": list(SELECTION_QUESTIONS),
                      "report": list(REPORT_QUESTIONS)},
            "prompts_seen": list(questions), "selection_prompts_seen": list(SELECTION_QUESTIONS),
            "seconds_data": t_data, **trained, "seconds_total": time.perf_counter() - t0}
    return scaled(edits, gain), info


def summary_of(info: dict) -> list[str]:
    """The record's summary of a distilled edit (the CLI prints it)."""
    chosen = next((r for r in info["selection"] if r.get("chosen")), {})
    first, last = info.get("loss_first") or {}, info.get("loss_last") or {}
    parts = ", ".join(f"{k} {first[k]:.3f} -> {last[k]:.3f}" for k in first if k != "step" and k in last)
    fmt = lambda x: "n/a" if x is None else f"{x:.2f}"  # noqa: E731
    tried = ", ".join(f"x{r['gain']:g}: {fmt(r['aggregate'])} / {r['kl']:.3f}" for r in info["selection"])
    return [
        f"distilled edit ({info['objective']}) of the {info['writer']} writers of layers {info['layers']}, rank "
        f"{info['rank']}: the unprompted model trained for {info['steps']} steps to imitate the same model told "
        f"{info['instruction']!r} (concept {info['concept']!r}), on {info['n_examples']} teacher answers "
        f"(data sha256 {info['data_sha256'][:12]}...)",
        f"training: {parts}; {info['seconds_total']:.0f} s in all",
        f"strength x{info['gain']:g} chosen on the selection questions: aggregate {fmt(chosen.get('aggregate'))} "
        f"(concept {fmt(chosen.get('concept'))}, relevance {fmt(chosen.get('relevance'))}, fluency "
        f"{fmt(chosen.get('fluency'))}), KL {chosen.get('kl', float('nan')):.3f}"
        + (f" <= ceiling {info['kl_ceiling']:g}" if chosen.get("within_ceiling") else
           f" (no strength within the ceiling {info['kl_ceiling']:g}: the smallest KL)"),
        f"tried (aggregate / KL): {tried}",
    ]


@dataclasses.dataclass
class DistilledDetails(Details):
    """What a distilled edit's record adds to the core: its training and strength choice
    (``distilled_steering``'s information: the teacher's data, the losses, every strength tried)."""

    training: dict


@register_method("distilled")
class Distilled(Method):
    """``sf.steer(model, method="distilled", token="ocean", tokenizer=tok)``: the distilled edit
    (package docstring). The concept is ``concept=`` or the call's ``token``/``text``; ``layers=`` (or
    ``layer=``) overrides the config's layers; ``prompts=`` the teacher's questions."""

    config = DistilledConfig
    details = DistilledDetails

    def plan(self, call: Call, cfg: Any) -> Plan:
        from ...measure import head_kind

        if head_kind(call.model) != "causal-lm":
            raise bad_argument("method", "distilled", f"a causal LM (a next-token head); {type(call.model).__name__} "
                               "has none")
        if call.tokenizer is None:
            raise bad_argument("tokenizer", None, "the model's tokenizer (the teacher answers text questions)")
        concept = call.token or call.text
        if not concept:
            raise bad_argument("token", None, "the word or phrase to steer toward", "Pass token='ocean' (CLI --token "
                               "ocean).")
        layers = call.layers if call.layers is not None else call.config.layer
        if layers is not None:
            layers = select_layers(layers, call.adapter.n_layers, name="layers")  # before any hook
        prompts = call.prompts
        if prompts is not None and not isinstance(prompts, (list, tuple)):
            raise bad_argument("prompts", type(prompts).__name__, "a list of questions (strings) for the teacher")
        edits, info = distilled_steering(call.model, call.tokenizer, str(concept), cfg, layers=layers,
                                         questions=prompts, progress=call.config.progress)
        chosen = next(r for r in info["selection"] if r["chosen"])
        info["chosen_by"] = (f"the best judged aggregate on the selection questions' answers among strengths "
                             f"{[r['gain'] for r in info['selection']]} (x the learned ΔW) with KL <= "
                             f"{info['kl_ceiling']:g}: x{info['gain']:g}, aggregate "
                             f"{chosen['aggregate'] if chosen['aggregate'] is None else round(chosen['aggregate'], 3)}"
                             f", KL {chosen['kl']:.3f}")
        source = {"kind": "distilled", "concept": info["concept"], "instruction": info["instruction"],
                  "objective": info["objective"], "data_sha256": info["data_sha256"], "n_examples": info["n_examples"]}
        message = (f"distilled {info['objective']} edit of layers {info['layers']}, rank {info['rank']}; strength "
                   f"x{info['gain']:g} chosen on the selection questions (KL {chosen['kl']:.3f})")
        u = edits[0].u
        return Plan(edits=edits, direction_source=source, message=message, details=DistilledDetails(info),
                    heldout_layer=None, direction=u if u.ndim == 1 else u[:, 0], extra={"selection": chosen})

    def measure(self, call: Call, plan: Plan, held: Any) -> dict:
        """The KL the ceiling bounds: on the selection questions' base answers, teacher-forced."""
        return {"kl": plan.extra["selection"]["kl"], "kl_kind": "teacher-forced on the selection questions' "
                                                                "base answers"}

    # ---- words -------------------------------------------------------------------------------
    def summary_lines(self, record: Any) -> list[str]:
        """What was trained, on what, the strength chosen and its judged scores, the evaluation when one ran."""
        lines = summary_of(record.details.training)
        return lines + self.evaluation_lines(record)

    def card_formula(self, record: Any) -> str:
        return str(record.edits[0].solve.get("formula")) if record.edits else Method.card_formula(self, record)

    def gain_text(self, record: Any) -> str:
        return f"γ = {record.gain:g} × the learned ΔW (the strength chosen on the selection questions)"

    def facts(self, record: Any) -> list[tuple[str, str]]:
        return [("chosen by", f"{record.details.training['chosen_by']} — {record.message}")]

    def phase_line(self, cfg: Any, call_config: Any, layers: Any, *, causal: bool, concept: bool) -> str:
        cfg = DistilledConfig(**cfg) if isinstance(cfg, dict) else cfg  # the CLI passes the options it was given
        return (f"distilled: the teacher's answers, {cfg.steps} training steps, then {len(cfg.gains)} strengths "
                "judged on the selection questions (minutes on a CPU; --quiet hides these lines) ...")


__all__ = ["Distilled", "DistilledDetails", "distilled_steering", "summary_of"]
