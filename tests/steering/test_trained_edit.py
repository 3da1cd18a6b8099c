"""The trained steering edit (``steering/methods/trained.py``) on a tiny random Llama: training lowers
its own loss, the edit written into the weights is the LoRA forward computed independently, undo is
bit-exact, the user's own data trains, and the prompts seen are recorded."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from steerformer.steering.methods.trained import (
    SELECTION_QUESTIONS, TRAIN_QUESTIONS, Example, train_edit, user_examples,
)

from ..models import make_model


def _model():
    model = make_model("llama", head=True, dtype=torch.float32).eval()
    with torch.no_grad():  # transformers' init (std 0.02) gives near-uniform next tokens: widen the head
        model.lm_head.weight.mul_(30.0)
    return model


def _examples(n: int = 6, seed: int = 0) -> list[Example]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        prompt = torch.randint(3, 64, (5,), generator=g).tolist()
        pos = [7, 8, 9, 10, 11, 12]  # the same "concept" answer everywhere: learnable
        neg = torch.randint(3, 64, (6,), generator=g).tolist()
        out.append(Example(prompt=prompt, positive=pos, negative=neg, source="test", question=f"q{i}"))
    return out


def _hashes(model) -> dict:
    return {k: hashlib.sha256(v.detach().cpu().contiguous().numpy().tobytes()).hexdigest()
            for k, v in model.state_dict().items()}


@pytest.mark.parametrize("objective", ["sft", "sft+reps"])
def test_training_lowers_its_own_loss(objective) -> None:
    model = _model()
    _, info = train_edit(model, None, _examples(), layers=[0, 1], rank=2, steps=30, lr=0.1, batch_size=6,
                         kl_weight=0.1, objective=objective, progress=False)
    h = info["history"]
    assert h[-1]["loss"] < 0.8 * h[0]["loss"], (h[0], h[-1])
    assert all(p.requires_grad for p in model.parameters())  # frozen only while training


def test_edit_in_weights_equals_the_lora_forward_computed_independently() -> None:
    model = _model()
    edits, _ = train_edit(model, None, _examples(), layers=[1], rank=2, steps=5, lr=0.05, objective="sft",
                          progress=False)
    e = edits[0]
    assert e.rank == 2 and e.module.endswith("mlp.down_proj.weight")
    ids = torch.tensor([[1, 5, 9, 13, 22, 40]])
    U, A = e.u.to(torch.float32), e.a.to(torch.float32)  # (out, k), (k, in)
    down = model.base_model.get_submodule(e.module.rsplit(".", 1)[0])
    hook = down.register_forward_hook(lambda m, a, out: out + e.gain * (a[0] @ A.T) @ U.T)
    with torch.no_grad():
        lora = model(ids).logits
        hook.remove()
        e.apply(model)
        merged = model(ids).logits
        e.remove(model)
        plain = model(ids).logits
    assert (lora - plain).abs().max() > 1e-3  # the edit does something
    assert torch.allclose(merged, lora, atol=1e-5, rtol=1e-5), (merged - lora).abs().max()


def test_undo_is_bit_exact_by_hash() -> None:
    model = _model()
    before = _hashes(model)
    edits, _ = train_edit(model, None, _examples(), layers=[0, 1], steps=3, objective="sft+reps", progress=False)
    for e in edits:
        e.apply(model)
    assert _hashes(model) != before
    for e in reversed(edits):
        e.remove(model)
    assert _hashes(model) == before


class _CharTokenizer:
    """Characters to ids 3…63 (no chat template): enough for the user-data path."""

    chat_template = None
    pad_token_id = 0
    eos_token_id = 2
    bos_token_id = 1

    def __call__(self, text, add_special_tokens=True):
        def enc(t):
            return [3 + (ord(c) % 61) for c in str(t)]
        return {"input_ids": [enc(t) for t in text] if isinstance(text, list) else enc(text)}


def test_user_positive_texts_and_pairs_train(tmp_path) -> None:
    tok = _CharTokenizer()
    texts = user_examples(tok, ["the sea is wide", "waves at the shore"])
    assert texts[0].negative is None and texts[0].positive == tok("the sea is wide")["input_ids"]
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"prompt": "hello", "positive": "the sea", "negative": "a desk"},
        {"prompt": "tell me", "positive": "ocean blue", "negative": "paper"}]))
    pairs = user_examples(tok, path)
    assert pairs[1].question == "tell me" and pairs[1].negative == tok("paper")["input_ids"]
    model = _model()
    _, info = train_edit(model, tok, texts, layers=[1], steps=4, objective="sft", kl_weight=0.0, progress=False)
    assert info["n_examples"] == 2
    _, info = train_edit(model, tok, pairs, layers=[1], steps=4, objective="sft+reps", progress=False)
    assert info["history"][-1]["reps"] >= 0


def test_positive_texts_alone_cannot_train_the_preference_objective() -> None:
    from steerformer.errors import SteerformerError

    tok = _CharTokenizer()
    with pytest.raises(SteerformerError, match="objective"):
        train_edit(_model(), tok, user_examples(tok, ["sea"]), layers=[1], steps=1, objective="reps", progress=False)


def test_selection_and_report_questions_are_never_trained_on() -> None:
    from steerformer.steering.evaluation.evaluate import HELDOUT_QUESTIONS

    assert not set(TRAIN_QUESTIONS) & set(SELECTION_QUESTIONS)
    assert not (set(TRAIN_QUESTIONS) | set(SELECTION_QUESTIONS)) & set(HELDOUT_QUESTIONS)
    model = _model()
    ex = _examples(4)
    for e, q in zip(ex, TRAIN_QUESTIONS):
        e.question = q
    _, info = train_edit(model, None, ex, layers=[1], steps=2, progress=False)
    assert set(info["prompts_seen"]) == set(TRAIN_QUESTIONS[:4])  # examples and the KL's neutral text


class _ChatlessTokenizer(_CharTokenizer):
    """The char tokenizer with decode and tokens (what generation and directions need)."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(97 + (int(i) - 3) % 26) for i in ids if int(i) >= 3)

    def convert_ids_to_tokens(self, ids):
        return [str(i) for i in ids]


def test_the_whole_method_sees_no_report_question_and_records_the_split() -> None:
    """Every row the model runs is recorded (a forward pre-hook): none holds a report question, and
    the selection questions are only seen after training (the strength's choice)."""
    from steerformer.steering.evaluation.judge import Rating
    from steerformer.steering.methods.trained import REPORT_QUESTIONS, TrainedConfig, trained_steering

    tok = _ChatlessTokenizer()
    model = _model()
    seen: list = []
    model.register_forward_pre_hook(lambda m, a, kw: seen.append(
        (kw.get("input_ids") if kw.get("input_ids") is not None else a[0]).tolist()), with_kwargs=True)
    judged: list = []

    def judge(items):
        judged.extend(it.question for it in items)
        return [Rating(2, 2, 2) for _ in items]

    config = TrainedConfig(concept="sea", layers=(1,), steps=3, samples=1, max_answer_tokens=4, gains=(0.5, 1.0))
    edits, info = trained_steering(model, tok, config, judge=judge, progress=False)
    flat = [row for batch in seen for row in batch]

    def ran(q: str) -> bool:
        ids = tok(q)["input_ids"]
        return any(r[i:i + len(ids)] == ids for r in flat for i in range(len(r) - len(ids) + 1))

    assert ran(SELECTION_QUESTIONS[0]) and ran(TRAIN_QUESTIONS[0])  # the detector sees what ran
    assert not any(ran(q) for q in REPORT_QUESTIONS)
    assert set(info["prompts_seen"]) <= set(TRAIN_QUESTIONS)
    assert set(judged) <= set(TRAIN_QUESTIONS) | set(SELECTION_QUESTIONS)
    assert info["split"]["report"] == list(REPORT_QUESTIONS) and info["gain"] in (0.5, 1.0)
    assert len(info["data_sha256"]) == 64 and info["objective"] == "sft+reps"


def test_steer_method_trained_records_the_data_and_unsteers_bit_for_bit() -> None:
    import steerformer as sf
    from steerformer.steering.evaluation.judge import Rating
    from steerformer.steering.methods import method_names

    assert "trained" in method_names()
    tok = _ChatlessTokenizer()
    model = _model()
    before = _hashes(model)
    # the judge accepts everything here: the offline judge needs the bundled MiniLM and real text
    import steerformer.steering.methods.trained as trained_mod

    original = trained_mod.generate_examples

    def generate(*a, **kw):
        return original(*a, **{**kw, "judge": lambda items: [Rating(2, 2, 2) for _ in items]})

    trained_mod.generate_examples = generate
    try:
        rec = sf.steer(model, method="trained", token="sea", tokenizer=tok, layers=[1], steps=3, samples=1,
                       max_answer_tokens=4, gains=(1.0,), report=False, select_max_kl=100.0)
    finally:
        trained_mod.generate_examples = original
    assert rec.method == "trained" and rec.direction_source["objective"] == "sft+reps"
    assert len(rec.direction_source["data_sha256"]) == 64 and rec.calibration["split"]["report"]
    assert _hashes(model) != before
    sf.unsteer(model)
    assert _hashes(model) == before
