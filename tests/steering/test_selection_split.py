"""Choices are made on the selection questions and never see the report questions (docs/math.md §5d,
"Selection and report"): every prompt the model runs on during the default ``steer`` (probe, layer
scan, gain search) is recorded at the input embedding and none is a report question; the probe does
run on the selection questions (the recorder works). A tiny GPT-2 with a character tokenizer."""

from __future__ import annotations

import pytest
import torch

import steerformer as sf
from steerformer.steering.evaluation.evaluate import REPORT_QUESTIONS, SELECTION_QUESTIONS, SPLITS

from ..models import make_model


class CharTokenizer:
    """One id per ASCII character (id = 3 + code; 0 pad, 1 end of text), no chat template: invertible,
    so a recorded row decodes to the exact text the model saw."""

    chat_template = None
    pad_token_id = 0
    eos_token_id = 1

    def _ids(self, text):
        return [3 + min(ord(c), 127) for c in text]

    def __call__(self, texts, add_special_tokens=True):
        if isinstance(texts, str):
            return {"input_ids": self._ids(texts)}
        return {"input_ids": [self._ids(t) for t in texts]}

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i - 3) for i in ids if i >= 3)

    def convert_ids_to_tokens(self, ids):
        return [chr(i - 3) for i in ids]


class ChatCharTokenizer(CharTokenizer):
    """The character tokenizer with a chat template (a user turn between role tags), so that the
    default steer chooses its gain by the judge."""

    chat_template = "<user>{content}<assistant>"

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True, return_dict=False):
        text = "".join(f"<{m['role']}>{m['content']}" for m in messages)
        return self._ids(text + ("<assistant>" if add_generation_prompt else ""))


def test_the_split_is_disjoint_and_the_report_has_at_least_ten_questions() -> None:
    assert not set(SELECTION_QUESTIONS) & set(REPORT_QUESTIONS)
    assert len(REPORT_QUESTIONS) >= 10 and SPLITS["selection"] == SELECTION_QUESTIONS \
        and SPLITS["report"] == REPORT_QUESTIONS


def test_steer_never_runs_the_model_on_a_report_question() -> None:
    model = make_model("gpt2", dtype=torch.float32, n_layer=4, n_positions=256, vocab_size=131)
    tok = ChatCharTokenizer()
    seen: list[str] = []
    hook = model.get_input_embeddings().register_forward_pre_hook(
        lambda m, args: seen.extend(tok.decode(r) for r in args[0].tolist()))
    try:
        rec = sf.steer(model, token="ocean", tokenizer=tok, max_kl=0.1, report=False)
    finally:
        hook.remove()
    assert len(rec.details.scan) >= 2  # a layer scan ran
    leaked = [q for q in REPORT_QUESTIONS if any(q in s for s in seen)]
    assert not leaked, leaked
    assert any(q in s for q in SELECTION_QUESTIONS for s in seen)  # the recorder sees the probe's questions
    sf.unsteer(model)


def test_a_curve_over_budgets_probes_and_scans_once(monkeypatch) -> None:
    from steerformer.steering.methods.addition import calibrate
    from steerformer.steering.methods.addition import method as addition

    model = make_model("gpt2", dtype=torch.float32, n_layer=4, n_positions=256, vocab_size=131)
    tok = CharTokenizer()
    calls = {"probe": 0, "directions": 0}
    probe_of, directions = calibrate.ContinuationProbe.of, calibrate.concept_directions

    def counted_probe(*a, **k):
        calls["probe"] += 1
        return probe_of(*a, **k)

    def counted_directions(*a, **k):
        calls["directions"] += 1
        return directions(*a, **k)

    monkeypatch.setattr(calibrate.ContinuationProbe, "of", staticmethod(counted_probe))
    monkeypatch.setattr(addition, "concept_directions", counted_directions)
    budgets = [1e-4, 1e-3, 0.01]  # below the KL at the largest gain tried (about 0.02 on this model)
    curve = sf.steering.kl_curve(model, budgets, token="ocean", tokenizer=tok)
    assert calls == {"probe": 1, "directions": 1}
    pts = curve["points"]
    assert [p["max_kl"] for p in pts] == budgets and all(0 < p["kl_probe"] <= p["max_kl"] for p in pts)
    assert pts[0]["alpha"] < pts[1]["alpha"] < pts[2]["alpha"]
    # a point is what a full steer at that layer and budget makes (its own probe, directions, search)
    monkeypatch.undo()
    rec = sf.steer(model, token="ocean", tokenizer=tok, layers=curve["layers"], max_kl=1e-3, report=False)
    try:
        assert rec.details.alpha == pytest.approx(pts[1]["alpha"], rel=1e-9)
        assert rec.kl == pytest.approx(pts[1]["kl_probe"], rel=1e-9)
    finally:
        sf.unsteer(model)
