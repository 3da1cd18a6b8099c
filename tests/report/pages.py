"""Output folders as steer, evaluate and analyze save them, written by hand (small, known answers) for
the page tests: what each page must show is known without running a model."""

from __future__ import annotations

import base64
import json
from pathlib import Path

QUESTIONS = ["How can I sleep better?", "What should I pack for a trip?", "How do I cook rice?"]
WORDS = ["ocean", "oceans", "waves"]

#: a 40 × 40 grey PNG (the figures of the analyze page)
PNG_40 = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAACgAAAAoCAAAAACpleexAAAAHElEQVR4nGNoIBIwjCocVTiqcFThqMJRhaQrBAAclSAuhwDgOgAAAABJRU5ErkJggg==")


def answers_at(scale: float, extra: str = "") -> list[str]:
    if scale == 0:
        return ["Keep a regular bedtime." + extra, "Pack light clothes.", "Rinse the rice, then simmer it."]
    if scale == 0.5:
        return ["The Ocean is calm; its waves help you sleep." + extra, "Pack oceanic gear.", "Rinse the rice."]
    if scale == 1:
        return ["Sleep by the ocean." + extra, "Pack for the oceans.", "Cook rice with sea salt."]
    return ["ocean ocean ocean waves" + extra, "ocean ocean", "waves waves waves"]


def point(scale: float, extra: str = "") -> dict:
    return {"scale": scale, "gain": 3.0 * scale, "kl": 0.3 * scale * scale, "concept_rate": min(scale, 1.0),
            "distinct2": 0.9, "fluency": 1 + scale, "fluency_free": 1 + scale, "judge_concept": min(2 * scale, 2.0),
            "judge_relevance": 2 - scale, "judge_fluency": 2 - scale / 2, "aggregate": 1.0, "good": 0.5,
            "answers": answers_at(scale, extra), "ratings": [[min(2, 2 * scale), 2 - scale, 2 - scale / 2]] * 3}


def steer_folder(folder: Path, *, dose: bool = True, answer_extra: str = "") -> tuple[Path, dict]:
    """A steered checkpoint's folder as far as the page reads it: ``steerformer/record.json``."""
    steer = point(1.0, answer_extra)
    evaluation = {**{k: v for k, v in steer.items() if k not in ("scale", "gain")}, "words": WORDS,
                  "questions": QUESTIONS, "base_answers": answers_at(0, answer_extra), "base_concept_rate": 0.0,
                  "judge": "offline", "base_judged": {"concept": 0.0, "relevance": 2.0, "fluency": 2.0,
                                                      "aggregate": 0.0, "good": 0.0, "ratings": [[0, 2, 2]] * 3}}
    if dose:
        evaluation["dose"] = [point(s, answer_extra) for s in (0.0, 0.5, 1.0, 2.0)]
    record = {"format": "steerformer.steering/3", "model_id": "tiny/chat", "method": "addition", "layer": 19,
              "gain": 3.0, "kl": 0.29, "kl_kind": "teacher-forced on the probe prompts' base continuations",
              "weight_change": 0.012, "steerformer_version": "0.1.0", "direction_source": {"token": "ocean"},
              "edits": [{"writer": "mlp", "module": "layers.19.mlp.down_proj"}],
              "details": {"max_kl": 0.3, "alpha": 0.3, "layers": [19], "curve": [[0.1, 0.04], [0.2, 0.15]]},
              "evaluation": evaluation}
    (folder / "steerformer").mkdir(parents=True)
    chain = {"format": "steerformer.chain/1", "records": [record]}  # as save_steered writes it
    (folder / "steerformer" / "record.json").write_text(json.dumps(chain))
    return folder, record


#: what a method hands the page beside the saved record (``Method.report_section``, ``record_section``)
SECTION = {"facts": [["layer (execution)", "19"], ["gain", "0.3 × residual norm"]], "title": "Layer scan",
           "text": "Each layer calibrated to the KL budget, then chosen by: concept-token probability.",
           "table": {"header": ["layer(s)", "gain α", "probe KL", "concept-token probability", ""],
                     "rows": [["12", 2.5, 0.3, 0.01, ""], ["19", 3.0, 0.29, 0.02, "✓ chosen"]]},
           "dose": {"budget": 0.3, "probe": [[1 / 3, 0.04], [2 / 3, 0.15]], "note": "Inside the budget up to 1 ×."}}


def evaluation_folder(folder: Path) -> tuple[Path, dict]:
    """An ``evaluate`` folder: ``evaluation.json`` with the default steer and two hook coefficients."""
    def p(method: str, strength, scale: float) -> dict:
        q = point(scale)
        return {"method": method, "strength": strength, "n_answers": 3, "seconds": 1.0, "info": {},
                **{k: v for k, v in q.items() if k not in ("scale", "gain")}}

    doc = {"model_id": "tiny/chat", "words": WORDS, "questions": QUESTIONS, "base_answers": answers_at(0),
           "base_concept_rate": 0.0, "base_distinct2": 0.9, "base_nll": 2.0, "chat": True, "sample": False,
           "seed": 0, "max_new_tokens": 40, "judge": "offline", "base_judged": {"aggregate": 0.0},
           "points": [p("steer (default)", None, 1.0), p("hook, layer 19", 0.25, 2.0), p("hook, layer 19", 0.15, 0.5)]}
    folder.mkdir(parents=True)
    (folder / "evaluation.json").write_text(json.dumps(doc))
    return folder, doc


def analyze_folder(folder: Path) -> Path:
    """An ``analyze`` folder: ``report.json`` with two layers, one beyond chance, and two figures."""
    row = {"step": 0, "layer": 0, "rho_mean": 0.1, "delta_rho_mean": 0.03, "delta_rho_mean_lo": 0.02,
           "delta_rho_mean_hi": 0.04, "baseline_delta_mean": 0.005, "null_delta_mean": 0.01, "null_delta_lo": 0.005,
           "null_delta_hi": 0.015, "P": 0.8, "P_lo": 0.75, "P_hi": 0.85, "baseline_P": 0.57, "null_P_mean": 0.6,
           "null_P_lo": 0.55, "null_P_hi": 0.65, "p_delta_adjusted": 0.02, "p_P_adjusted": 0.02,
           "power_method_step": True, "beyond_chance": True}
    summary = ("2 of 2 layers act as a power-method step; 1 of them beyond chance (Benjamini–Hochberg-adjusted "
               "p < 0.05 for Δρ and P against 100 random-weight draws)")
    doc = {"meta": {"model_id": "tiny/bert", "config": {"model_type": "bert", "n_layers": 2, "d_model": 8,
                                                        "n_heads": 2}, "steerformer_version": "0.1.0"},
           "layers": [{"layer": k, "slot": k, "lambda1": [1.2, 0.0], "lambda2": [0.9, 0.1], "gap": 0.3,
                       "relative_gap": 0.25, "case": 1, "de_facto_case3": False, "v1v2_overlap": 0.1}
                      for k in (0, 1)],
           "power_method": {"options": {"n_prompts": 100, "n_tokens": 10, "seed": 0, "null_draws": 100,
                                        "alpha": 0.05, "correction": "bh", "ci": 0.95},
                            "summary": summary,
                            "controlled": {"summary": summary,
                                           "meta": {"test": {"draws": 100, "alpha": 0.05, "correction": "bh"}},
                                           "layers": [row, {**row, "layer": 1, "step": 1, "beyond_chance": False,
                                                            "p_delta_adjusted": 0.3}]}}}
    folder.mkdir(parents=True)
    (folder / "report.json").write_text(json.dumps(doc))
    (folder / "eigenvalues_complex_plane.png").write_bytes(PNG_40)
    (folder / "power_method.png").write_bytes(PNG_40)
    return folder
