"""Steer a tiny random GPT-2 toward one token and generate through a text-generation pipeline.

The model (2 layers, d = 64) and a character-level tokenizer are built here from configs, so the
script runs offline in seconds. The direction is the LM head's *unembedding* row of the letter
"z" (``token="z"``): pushing the final states toward it raises that token's logit. Greedy
generation before and after the edit, then after ``unsteer``:
    python examples/steer_tiny_gpt2_generate.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast, pipeline  # noqa: E402

from steerformer.steering import steer, unsteer  # noqa: E402

CHARS = list("abcdefghijklmnopqrstuvwxyz .,")


def char_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {"<eos>": 0, **{c: i + 1 for i, c in enumerate(CHARS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<eos>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")  # one token per character
    tok.decoder = decoders.Fuse()  # and join them back without spaces
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>")


def tiny_gpt2(vocab_size: int) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=vocab_size, n_positions=128,
                     bos_token_id=0, eos_token_id=0, pad_token_id=0)
    return GPT2LMHeadModel(cfg).eval()


def main() -> dict:
    tok = char_tokenizer()
    model = tiny_gpt2(len(tok))
    gen = pipeline("text-generation", model=model, tokenizer=tok, device="cpu")
    prompt = "the cat sat on the mat"

    def sample() -> str:
        out = gen(prompt, max_new_tokens=40, do_sample=False, pad_token_id=0)[0]["generated_text"]
        return out[len(prompt):]

    before = sample()
    record = steer(model, token="z", tokenizer=tok, strength=30.0)
    after = sample()  # same pipeline object: the model was edited in place
    unsteer(model)
    restored = sample()
    print(f"direction: {record.direction_source}; gain {record.gain:.4g}; KL (next-token) {record.kl:.3g}")
    print(f"before : {before!r}\nafter  : {after!r}\nunsteer: {restored!r}")
    print(f"share of 'z': {before.count('z') / len(before):.2f} -> {after.count('z') / len(after):.2f}")
    return {"before": before, "after": after, "restored": restored}


if __name__ == "__main__":
    res = main()
    ok = res["after"].count("z") > res["before"].count("z") + 5 and res["restored"] == res["before"]
    sys.exit(0 if ok else 1)
