"""The page of a steering run: each report question answered by the base model and the steered one
side by side (the concept's words marked, the judge's three ratings under each answer), a strength
slider over the answers at every strength the evaluation ran, the dose curve, the edit's facts,
the section of the method that made it, and the commands that undo or export the edit.

Two sources, both read as saved JSON (so any earlier output folder renders):

* a steered checkpoint (``steer --evaluate``): ``steerformer/record.json``, whose ``evaluation``
  holds the answers and, when the evaluation ran a dose curve, ``evaluation["dose"]`` (answers at
  multiples of the chosen gain). What only its method knows comes as a *section*: data the method
  wrote (``Method.report_section``, handed over by the caller: this package reads no steering code),
  ``{"facts": [[label, text]], "title", "text", "table": {"header", "rows"}, "dose": {"budget",
  "probe", "note"}}``, every key optional;
* an evaluation folder (``steerformer evaluate``): ``evaluation.json``, one point per (method,
  strength): the slider runs over them in order of KL.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from .html import Markup, esc, highlight, number, page, table
from .svg import Series, line_chart

AXES = ("concept", "relevance", "fluency")


# ---- the steps of the slider ----------------------------------------------------------------------
def step(label: str, point: Mapping, *, x: float | None = None, gain: float | None = None) -> dict:
    """One position of the slider: a label, the strength, the answers with their ratings and means."""
    return {"label": label, "x": x, "gain": gain, "kl": point.get("kl"), "concept_rate": point.get("concept_rate"),
            "concept": point.get("judge_concept"), "relevance": point.get("judge_relevance"),
            "fluency": point.get("judge_fluency"), "aggregate": point.get("aggregate"), "good": point.get("good"),
            "answers": list(point.get("answers") or []), "ratings": list(point.get("ratings") or [])}


def base_step(answers: Sequence[str], judged: Mapping | None, concept_rate: float | None) -> dict:
    """The slider's first position: the base model, its judged means keyed by axis (``judged``)."""
    point = {**(judged or {}), **{f"judge_{a}": (judged or {}).get(a) for a in AXES}}
    return step("base model (strength 0)", {**point, "kl": 0.0, "concept_rate": concept_rate, "answers": answers},
                x=0.0, gain=0.0)


def record_steps(record: Mapping) -> tuple[list[dict], int]:
    """The slider's steps of a record's evaluation and the index of the chosen strength: the dose
    curve when the evaluation ran one, else the base model and the steer."""
    ev = record.get("evaluation") or {}
    dose = ev.get("dose")
    if dose:
        dose = sorted(dose, key=lambda p: p["scale"])
        steps = [step("base model (strength 0)" if p["scale"] == 0 else
                      f"{p['scale']:g} × the chosen strength" + (" (the steer)" if p["scale"] == 1 else ""),
                      p, x=p["scale"], gain=p.get("gain")) for p in dose]
        return steps, next((i for i, p in enumerate(dose) if p["scale"] == 1), 0)
    base = base_step(ev.get("base_answers") or [], ev.get("base_judged"), ev.get("base_concept_rate"))
    return [base, step("the steer (chosen strength)", ev, x=1.0, gain=record.get("gain"))], 1


def evaluation_steps(doc: Mapping) -> tuple[list[dict], int]:
    """The slider's steps of an ``evaluate`` folder: the base model, then every point by KL; the
    chosen one is the default steer (else the point with the best aggregate)."""
    points = sorted(doc.get("points") or [], key=lambda p: (p.get("kl") is None, p.get("kl") or 0.0))
    steps = [base_step(doc.get("base_answers") or [], doc.get("base_judged"), doc.get("base_concept_rate"))]
    for p in points:
        s = p.get("strength")
        steps.append(step(p["method"] + ("" if s is None else f", coefficient {s:g}"), p, x=p.get("kl"),
                          gain=(p.get("info") or {}).get("gain")))
    chosen = next((i for i, s in enumerate(steps) if s["label"].startswith("steer")), None)
    if chosen is None:
        chosen = max(range(1, len(steps)), key=lambda i: steps[i]["aggregate"] or 0.0, default=0)
    return steps, chosen


# ---- pieces of the page -----------------------------------------------------------------------------
def ratings_html(rating: Sequence[float | None] | None) -> str:
    """The three ratings under an answer; an axis the judge left without a rating reads "not rated"."""
    if not rating:
        return ""
    return "".join(f'<span class="r" title="{a}: not rated (the judge gave no rating)">{a} –</span>' if v is None
                   else f'<span class="r r{min(int(round(v)), 2)}" title="{a}: {v:g} of 2">{a} {v:g}</span>'
                   for a, v in zip(AXES, rating))


def means_line(s: Mapping) -> str:
    parts = [f"KL {number(s['kl'])} nats/token", f"concept rate {number(s['concept_rate'], 2)}"]
    if s.get("aggregate") is not None:
        parts += [f"judged concept {number(s['concept'], 2)}, relevance {number(s['relevance'], 2)}, fluency "
                  f"{number(s['fluency'], 2)}", f"aggregate {number(s['aggregate'], 2)}",
                  f"good steers {number(s['good'], 2)}"]
    return " · ".join(parts)


def slider_html(steps: Sequence[Mapping], chosen: int) -> str:
    ticks = "".join(f"<span>{esc(number(s['x'], 3) if s['x'] is not None else i)}</span>" for i, s in enumerate(steps))
    now = "".join(f'<div class=now data-step="{i}"{"" if i == chosen else " hidden"}><b>{esc(s["label"])}</b>'
                  + (f" (gain {number(s['gain'], 4)})" if s.get("gain") else "")
                  + f"<br>{means_line(s)}</div>" for i, s in enumerate(steps))
    return (f'<div class=slider><label for=strength>Strength: drag to see the answers change</label>'
            f'<input id=strength type=range min=0 max="{len(steps) - 1}" step=1 value="{chosen}">'
            f"<div class=ticks>{ticks}</div>{now}</div>")


def answer_html(s: Mapping, q: int, words: Sequence[str], *, step: int | None = None, shown: bool = True) -> str:
    """Step ``s``'s answer to question ``q`` with its ratings; ``step``: the slider position it
    belongs to (None: the base model's, always shown)."""
    text = s["answers"][q] if q < len(s["answers"]) else ""
    rating = s["ratings"][q] if q < len(s["ratings"]) else None
    attrs = "" if step is None else f' data-step="{step}"' + ("" if shown else " hidden")
    who = "base model" if step is None else esc(s["label"])
    return (f'<div class="ans{"" if step is None else " steered"}"{attrs}><div class=who>{who} '
            f"{ratings_html(rating)}</div><div class=text>{highlight(text, words)}</div></div>")


def answers_html(questions: Sequence[str], base: Mapping, steps: Sequence[Mapping], chosen: int,
                 words: Sequence[str]) -> str:
    """Each question: the base answer (left) and one answer per slider position (right, one shown)."""
    return "".join(f'<div class=qa><div class=q>{q + 1}. {esc(text)}</div>{answer_html(base, q, words)}<div>'
                   + "".join(answer_html(s, q, words, step=i, shown=i == chosen) for i, s in enumerate(steps))
                   + "</div></div>" for q, text in enumerate(questions))


def dose_figures(steps: Sequence[Mapping], chosen: int, *, x_label: str, budget: float | None,
                 band: tuple[float, float] | None, probe: Sequence[Sequence[float]] = ()) -> str:
    """The dose curve: the judge's means (0–2) and the KL against strength, the chosen strength and
    the band inside the KL budget marked."""
    pts = [s for s in steps if s["x"] is not None]
    xs = [s["x"] for s in pts]
    marker = steps[chosen]["x"]
    judged = [Series(key, xs, [s[key] for s in pts]) for key in ("aggregate", *AXES)] \
        if any(s["aggregate"] is not None for s in pts) else []
    band_label = "inside the KL budget" if band else ""
    left = line_chart(judged + [Series("good-steer share ×2", xs, [None if s["good"] is None else 2 * s["good"]
                                                                   for s in pts], dashed=True),
                                Series("concept rate ×2", xs, [None if s["concept_rate"] is None else
                                                               2 * s["concept_rate"] for s in pts], dashed=True)],
                      title="judged answers against strength", x_label=x_label, y_label="rating (0–2)",
                      y_range=(0.0, 2.0), band=band, band_label=band_label, marker=marker, marker_label="chosen")
    kl_series = [Series("KL on the answers", xs, [s["kl"] for s in pts])]
    if probe:
        kl_series.append(Series("KL on the probe (budget's text)", [p[0] for p in probe], [p[1] for p in probe],
                                dashed=True))
    right = line_chart(kl_series, title="KL(base ‖ steered) against strength", x_label=x_label,
                       y_label="nats per token", band=band, band_label=band_label, marker=marker,
                       marker_label="chosen", hline=budget, hline_label=f"budget {budget:g}" if budget else "")
    return f"<div style='display:flex;flex-wrap:wrap;gap:8px'>{left}{right}</div>"


def section_html(section: Mapping) -> str:
    """A method's section (module doc): its title, text and table."""
    tab = section.get("table") or {}
    if not (section.get("text") or tab.get("rows")):
        return ""
    body = (f"<p>{esc(section['text'])}</p>" if section.get("text") else "") + \
        (table(tab.get("header"), tab.get("rows") or []) if tab.get("rows") else "")
    return f"<section><h2>{esc(section.get('title') or 'The method')}</h2>{body}</section>"


def facts_html(record: Mapping, section: Mapping) -> str:
    """The table of the edit: the section's facts (the model card's rows), else what every record has."""
    rows = [tuple(r) for r in section.get("facts") or []] or [
        ("model", record.get("model_id")), ("method", record.get("method")), ("layer", record.get("layer")),
        ("gain", number(record.get("gain"), 5)),
        ("KL", f"{number(record.get('kl'))} nats/token, {record.get('kl_kind') or 'n/a'}"),
        ("weight change ‖ΔW‖/‖W‖", number(record.get("weight_change")))]
    return table(None, [*rows, ("steerformer", record.get("steerformer_version"))], left=2, cls="facts")


def commands_html(model_id: str) -> str:
    return ("<pre>steerformer unsteer DIR --out DIR-original        # the original weights, bit for bit\n"
            "steerformer verify DIR                            # replay the record and check every hash\n"
            "steerformer export DIR --format gguf --out m.gguf   # for llama.cpp / Ollama\n"
            "steerformer export DIR --format peft --out lora     # a PEFT LoRA adapter\n"
            "steerformer report DIR                            # this page again</pre>"
            f"<p>DIR is this folder; it loads with plain <code>from_pretrained</code> too (base: "
            f"<code>{esc(model_id)}</code>).</p>")


def slider_script() -> str:
    """Show the answers and the numbers of the slider's step (the elements marked ``data-step``)."""
    return ("(function(){var s=document.getElementById('strength');if(!s)return;"
            "function show(){var v=s.value;document.querySelectorAll('[data-step]').forEach(function(e){"
            "e.hidden=e.getAttribute('data-step')!==v;});}s.addEventListener('input',show);show();})();")


def _page(title: str, sub: str, questions: Sequence[str], words: Sequence[str], steps: list[dict], chosen: int,
          figures: str, extra: str, figures_title: str = "Dose curve") -> str:
    base = steps[0]
    intro = (f"<p>{len(questions)} report questions (never used to choose the layer or the gain), answered by the "
             "base model (left) and the steered model (right) at the strength the slider picks. The concept's words "
             f"(<mark>{esc(', '.join(words))}</mark>) are marked; under each answer the judge's ratings, 0–2, on "
             "concept, relevance to the question and fluency.</p>")
    body = (f"<h1>{esc(title)}</h1><p class=sub>{esc(sub)}</p>"
            f"<section><h2>{esc(figures_title)}</h2>{figures}</section>"
            f"<section><h2>Answers, plain and steered</h2>{intro}{slider_html(steps, chosen)}"
            f"{answers_html(questions, base, steps, chosen, words)}</section>{extra}")
    return page(title, body, script=slider_script())


def record_page(record: Mapping, *, earlier: int = 0, section: Mapping | None = None) -> str:
    """The page of a steered checkpoint's last record (in ``steerformer/record.json``) that carries
    an evaluation; without one, the facts and commands only. ``earlier``: how many steering calls
    the chain holds before it (said on the page: their edits are in the weights too); ``section``:
    its method's section (module doc)."""
    section = section or {}
    ev = record.get("evaluation") or {}
    concept = (record.get("direction_source") or {})
    word = concept.get("phrase") or concept.get("token") or concept.get("text") or ", ".join(ev.get("words") or [])
    title = f"steer {record.get('model_id')} toward “{word}”"
    sub = f"steerformer {record.get('steerformer_version', '')}; method {record.get('method') or '?'}"
    if earlier:
        sub += f"; the last of {earlier + 1} steering calls (the earlier ones' edits are in the weights too)"
    facts = (f"<section><h2>The edit</h2>{facts_html(record, section)}</section>{section_html(section)}"
             f"<section><h2>Undo, verify, export</h2>{commands_html(str(record.get('model_id')))}</section>")
    if not ev.get("answers"):
        body = (f"<h1>{esc(title)}</h1><p class=sub>{esc(sub)}</p><p>This record carries no evaluation: run "
                "<code>steerformer steer … --evaluate</code> for the answers, the slider and the dose curve.</p>" + facts)
        return page(title, body)
    steps, chosen = record_steps(record)
    dose = section.get("dose") or {}
    budget = dose.get("budget")
    probe = [(x, k) for x, k in dose.get("probe") or [] if math.isfinite(x) and math.isfinite(k)]
    figures = dose_figures(steps, chosen, x_label="strength (× the chosen gain)", budget=budget,
                           band=(0.0, 1.0) if budget is not None else None,
                           probe=[p for p in probe if p[0] <= max(s["x"] for s in steps) * 1.05])
    note = f"<p>{esc(dose['note'])}</p>" if dose.get("note") else ""
    return _page(title, sub, ev.get("questions") or [], ev.get("words") or [], steps, chosen, figures + note, facts)


def evaluation_page(doc: Mapping) -> str:
    """The page of an ``evaluate`` folder (``evaluation.json``)."""
    steps, chosen = evaluation_steps(doc)
    title = f"evaluate {doc.get('model_id')}: steering toward “{', '.join(doc.get('words') or [])}”"
    sub = (f"{len(doc.get('questions') or [])} held-out questions, {'sampled' if doc.get('sample') else 'greedy'}, "
           f"{doc.get('max_new_tokens')} tokens; judge: {doc.get('judge') or 'none'}")
    lines: dict[str, list[dict]] = {}
    for s in steps[1:]:
        lines.setdefault(s["label"].split(", coefficient")[0], []).append(s)
    kl_lines = [Series(label, [s["kl"] for s in pts], [s["aggregate"] if s["aggregate"] is not None else
                                                       s["concept_rate"] for s in pts]) for label, pts in lines.items()]
    judged = any(s["aggregate"] is not None for s in steps)
    figure = line_chart(kl_lines, title=("judged aggregate" if judged else "concept rate") + " against KL, per method",
                        x_label="KL(base ‖ steered), nats/token, on the answers",
                        y_label="aggregate (0–2)" if judged else "concept rate", marker=steps[chosen]["kl"],
                        marker_label="default steer", width=720)
    rows = [[s["label"], s["kl"], s["concept_rate"], s["aggregate"], s["good"]] for s in steps]
    extra = ("<section><h2>Every variant</h2>" + table(["variant", "KL", "concept rate", "aggregate", "good"], rows)
             + "<p>Recompute with <code>steerformer evaluate MODEL --token WORD --out DIR</code>; this page with "
             "<code>steerformer report DIR</code>.</p></section>")
    return _page(title, sub, doc.get("questions") or [], doc.get("words") or [], steps, chosen,
                 Markup(figure), extra, figures_title="Each variant against its KL")
