"""The distilled method (``steering/methods/distilled/``) on a tiny random Llama: training lowers the
KL to the instructed teacher, the edit written into the weights is the LoRA forward computed by a
hook of our own, undo is bit-exact, a failed call leaves no hook behind, no report question is
ever run, and the record saves, words its card and reloads."""

from __future__ import annotations

import hashlib

import pytest
import torch

import steerformer as sf
from steerformer.errors import SteerformerError
from steerformer.prompts import REPORT_QUESTIONS, SELECTION_QUESTIONS, TRAIN_QUESTIONS
from steerformer.steering.methods.distilled.config import DistilledConfig, default_layers
from steerformer.steering.methods.distilled.teacher import Example
from steerformer.steering.methods.distilled.training import edit_writers, train_edit

from ..models import make_model


class WordTokenizer:
    """Whole words to ids 3…63 (no chat template): the questions and the instruction fit the tiny
    model's 64 positions."""

    chat_template = None
    pad_token_id, eos_token_id, bos_token_id = 0, 2, 1

    @staticmethod
    def word_id(w: str) -> int:
        return 3 + sum(ord(c) * 31 ** i for i, c in enumerate(w)) % 61

    def __call__(self, text, add_special_tokens=True):
        enc = lambda t: [self.word_id(w) for w in str(t).split()]  # noqa: E731
        return {"input_ids": [enc(t) for t in text] if isinstance(text, list) else enc(text)}

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(f"w{int(i)}" for i in ids if int(i) >= 3)


def _model():
    model = make_model("llama", head=True, dtype=torch.float32).eval()
    with torch.no_grad():  # transformers' init (std 0.02) gives near-uniform next tokens: widen the head
        model.lm_head.weight.mul_(30.0)
    return model


def _examples(n: int = 6, seed: int = 0) -> list[Example]:
    """Student and teacher prompts that differ (the teacher's carries an instruction), one answer."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        q = torch.randint(3, 64, (5,), generator=g).tolist()
        answer = torch.randint(3, 64, (6,), generator=g).tolist()
        teacher = torch.randint(3, 64, (9,), generator=g).tolist()  # another prompt: another distribution
        out.append(Example(question=f"q{i}", student=q, teacher=teacher, answer=answer,
                           neutral=torch.randint(3, 64, (6,), generator=g).tolist()))
    return out


def _tiny_chat_llama():
    """The tiny Llama with a byte-level tokenizer and a minimal chat template (every string
    tokenizes; 512 positions: byte-level chat prompts are long)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

    from ..models import family_config

    vocab = {t: i for i, t in enumerate(["<pad>", "<s>", "</s>"] + sorted(pre_tokenizers.ByteLevel.alphabet()))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>")
    tok.chat_template = ("{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}</s>\n{% endfor %}"
                         "{% if add_generation_prompt %}<s>assistant\n{% endif %}")
    cfg = family_config("llama")
    cfg.vocab_size, cfg.max_position_embeddings = len(vocab), 512
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval(), tok


def _hashes(model) -> dict:
    return {k: hashlib.sha256(v.detach().cpu().contiguous().numpy().tobytes()).hexdigest()
            for k, v in model.state_dict().items()}


def _hook_count(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def _train(model, **kw):
    from steerformer.loading import open_source

    adapter = open_source(model).adapter
    layers = kw.pop("layers", [1])
    writers = edit_writers(adapter, layers, kw.pop("writer", "mlp"), "tiny")
    return train_edit(model, adapter, kw.pop("examples", None) or _examples(), layers=layers, writers=writers,
                      progress=False, **kw)


def _steer(model, **kw):
    return sf.steer(model, method="distilled", token="sea", tokenizer=WordTokenizer(), steps=3, max_answer_tokens=4,
                    select_judge="none", **{"gains": (1.0,), **kw})


@pytest.mark.parametrize("objective,at_most", [("kl", 0.75), ("states", 0.8), ("kl+states", 0.9)])
def test_training_lowers_the_gap_to_the_instructed_teacher(objective, at_most) -> None:
    model = _model()
    _, info = _train(model, layers=[0, 1], rank=4, steps=40, lr=0.03, batch_size=6, kl_weight=0.0,
                     objective=objective)
    first, last = info["history"][0], info["history"][-1]
    assert first["loss"] > 0 and last["loss"] < at_most * first["loss"], (first, last)
    assert all(p.requires_grad for p in model.parameters())  # frozen only while training


def test_a_teacher_that_sees_what_the_student_sees_starts_at_zero_gap() -> None:
    """The teacher's targets and the student's predictions line up token by token: with the same
    prompt on both sides and the edit at zero, the KL and the state gap are exactly 0."""
    same = _examples()
    for e in same:
        e.teacher = list(e.student)
    _, info = _train(_model(), steps=1, examples=same, objective="kl+states")
    assert info["history"][0]["kl"] == 0.0 and info["history"][0]["states"] == 0.0


def test_edit_in_weights_equals_a_hooked_lora_forward() -> None:
    model = _model()
    edits, _ = _train(model, rank=2, steps=5, lr=0.05)
    e = edits[0]
    assert e.rank == 2 and e.module.endswith("mlp.down_proj.weight") and e.kind == "lora"
    ids = torch.tensor([[1, 5, 9, 13, 22, 40]])
    U, A = e.u.to(torch.float32), e.a.to(torch.float32)  # (out, k), (k, in)
    down = model.base_model.get_submodule(e.module.rsplit(".", 1)[0])
    with torch.no_grad():
        plain = model(ids).logits
        hook = down.register_forward_hook(lambda m, a, out: out + 1.5 * (a[0] @ A.T) @ U.T)
        lora = model(ids).logits
        hook.remove()
        scaled = e.to_dict() | {"gain": 1.5}
        applied = type(e).from_dict(scaled).apply(model)
        merged = model(ids).logits
        applied.remove(model)
    assert (lora - plain).abs().max() > 1e-4  # the edit does something
    assert torch.allclose(merged, lora, atol=1e-5, rtol=1e-5), (merged - lora).abs().max()


def test_default_layers_follow_the_models_depth() -> None:
    assert default_layers(30) == (14, 19) and default_layers(2) == (0, 1) and default_layers(1) == (0,)
    assert default_layers(12) == (6, 7)


def test_bad_layers_are_refused_before_any_hook_and_a_failed_call_leaves_none() -> None:
    model = _model()
    hooks, before = _hook_count(model), _hashes(model)
    with pytest.raises(SteerformerError, match="layers"):
        _steer(model, layers=[19])  # the 2-layer model has no layer 19
    assert _hook_count(model) == hooks and _hashes(model) == before

    import steerformer.steering.methods.distilled.training as training

    original = training.kl_per_token

    def broken(*a):
        raise RuntimeError("boom in the middle of training")

    training.kl_per_token = broken
    try:
        with pytest.raises(RuntimeError, match="boom"):
            _steer(model)
    finally:
        training.kl_per_token = original
    assert _hook_count(model) == hooks and _hashes(model) == before
    assert all(p.requires_grad for p in model.parameters())


def test_the_method_never_runs_a_report_question() -> None:
    """Every row the model runs is recorded (a pre-hook on the base model, which every forward and
    every generation passes): none holds a report question; the train questions are the teacher's
    (with the instruction) and the student's, the selection questions only the strength's."""
    from steerformer.steering.evaluation.judge import Rating
    from steerformer.steering.methods.distilled.method import distilled_steering

    tok = WordTokenizer()
    model = _model()
    seen: list = []
    handle = model.model.register_forward_pre_hook(lambda m, a, kw: seen.append(
        (kw.get("input_ids") if kw.get("input_ids") is not None else a[0]).tolist()), with_kwargs=True)
    judged: list = []

    def judge(items):
        judged.extend(it.question for it in items)
        return [Rating(2, 2, 2) for _ in items]

    try:
        edits, info = distilled_steering(model, tok, "sea", DistilledConfig(steps=2, max_answer_tokens=4,
                                                                            gains=(0.5, 1.0)), judge=judge,
                                         progress=False)
    finally:
        handle.remove()
    flat = [row for batch in seen for row in batch]

    def ran(q: str) -> bool:
        ids = tok(q)["input_ids"]
        return any(r[i:i + len(ids)] == ids for r in flat for i in range(len(r) - len(ids) + 1))

    assert ran(SELECTION_QUESTIONS[0]) and ran(TRAIN_QUESTIONS[0])  # the detector sees what ran
    assert ran(f"{TRAIN_QUESTIONS[0]} You must include content related to sea")  # the teacher's turn
    assert not any(ran(q) for q in REPORT_QUESTIONS)
    assert set(judged) <= set(SELECTION_QUESTIONS) and info["prompts_seen"] == list(TRAIN_QUESTIONS)
    assert info["split"]["report"] == list(REPORT_QUESTIONS) and info["gain"] in (0.5, 1.0)
    with pytest.raises(SteerformerError, match="prompts"):
        distilled_steering(model, tok, "sea", questions=[REPORT_QUESTIONS[0]], progress=False)


def test_record_saves_words_its_card_reloads_and_unsteers_bit_for_bit(tmp_path) -> None:
    from steerformer.steering import read_records
    from steerformer.steering.direction import Direction

    model = _model()
    before = _hashes(model)
    rec = _steer(model, layers=[0, 1], rank=2, gains=(0.5, 2.0))
    assert rec.method == "distilled" and len(rec.edits) == 2
    cal = rec.details.training
    assert len(cal["data_sha256"]) == 64 and cal["instruction"].startswith("{question} You must include")
    assert cal["objective"] == "kl" and cal["layers"] == [0, 1] and cal["rank"] == 2 and cal["steps"] == 3
    assert [r["gain"] for r in cal["selection"]] == [0.5, 2.0] and rec.edits[0].gain == cal["gain"]
    assert "distilled edit (kl)" in rec.summary() and "chosen on the selection questions" in rec.summary()
    tok = WordTokenizer()
    out = sf.save_steered(model, tmp_path / "steered", tokenizer=None if not hasattr(tok, "save_pretrained") else tok)
    card = (out / "README.md").read_text()
    assert "the best judged aggregate on the selection questions" in card and "W' = W + γ U A" in card
    back = read_records(out)[-1]
    assert back.details.training["data_sha256"] == cal["data_sha256"] and back.edits == rec.edits
    assert back.summary() == rec.summary()
    with pytest.raises(SteerformerError, match="depends on each token"):
        Direction.from_record(back)  # a control vector cannot carry it
    sf.unsteer(model)
    assert _hashes(model) == before


def test_steer_method_distilled_runs_from_the_command_line(tmp_path) -> None:
    """``steerformer steer MODEL --method distilled --token ocean --out DIR``: the defaults of its
    config, the offline judge, a saved checkpoint whose card and record say what was done."""
    from steerformer.steering import read_records
    from steerformer.steering.evaluation.judge import MiniLM
    from tests.conftest import run_cli

    if not MiniLM.available():
        pytest.skip("the offline judge needs the bundled MiniLM")
    model, tok = _tiny_chat_llama()
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    res = run_cli(["steer", tmp_path / "model", "--method", "distilled", "--token", "ocean", "--layer", "1",
                   "--quiet", "--out", tmp_path / "steered"])
    assert res.exit_code == 0, res.output
    assert "distilled edit (kl) of the mlp writers of layers [1]" in res.output
    rec = read_records(tmp_path / "steered")[-1]
    assert rec.method == "distilled" and rec.details.training["layers"] == [1]
    assert "the best judged aggregate" in (tmp_path / "steered" / "README.md").read_text()
    bad = run_cli(["steer", tmp_path / "model", "--method", "distilled", "--token", "ocean", "--layer", "19"])
    assert bad.exit_code == 2 and "--layer" in bad.output
