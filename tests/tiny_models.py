"""Tiny random models of every supported family, built from configs (no network)."""

from __future__ import annotations

import torch
from transformers import (
    AlbertConfig, AlbertModel, BertConfig, BertForMaskedLM, BertModel, GPT2Config, GPT2LMHeadModel,
    GPT2Model, GPTNeoConfig, GPTNeoForCausalLM, GPTNeoModel,
)

VOCAB = 101


def _cfg_common() -> dict:
    return {"attn_implementation": "eager"}


def gpt2_config(**kw) -> GPT2Config:
    base = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=64, bos_token_id=0, eos_token_id=0)
    return GPT2Config(**{**base, **kw})


def gpt_neo_config(**kw) -> GPTNeoConfig:
    base = dict(num_layers=2, hidden_size=64, num_heads=4, attention_types=[[["global", "local"], 1]],
                window_size=3, vocab_size=VOCAB, max_position_embeddings=64, bos_token_id=0, eos_token_id=0,
                intermediate_size=128)
    return GPTNeoConfig(**{**base, **kw})


def bert_config(**kw) -> BertConfig:
    base = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                vocab_size=VOCAB, max_position_embeddings=64)
    return BertConfig(**{**base, **kw})


def albert_config(**kw) -> AlbertConfig:
    base = dict(num_hidden_layers=4, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                embedding_size=32, num_hidden_groups=1, inner_group_num=1, vocab_size=VOCAB,
                max_position_embeddings=64, bos_token_id=2, eos_token_id=3, pad_token_id=0)
    return AlbertConfig(**{**base, **kw})


#: name -> (model class, config factory); one entry per family variant the tests cover.
FAMILIES = {
    "gpt2": (GPT2LMHeadModel, gpt2_config),
    "gpt2-base": (GPT2Model, gpt2_config),
    "gpt_neo": (GPTNeoForCausalLM, gpt_neo_config),
    "gpt_neo-base": (GPTNeoModel, gpt_neo_config),
    "bert": (BertModel, bert_config),
    "bert-mlm": (BertForMaskedLM, bert_config),
    "albert": (AlbertModel, albert_config),
    "albert-2groups-inner2": (AlbertModel, lambda **kw: albert_config(num_hidden_groups=2, inner_group_num=2, **kw)),
}


def make_model(name: str, seed: int = 0, dtype: torch.dtype = torch.float64, **config_kw):
    cls, cfg = FAMILIES[name]
    torch.manual_seed(seed)
    config = cfg(**config_kw)
    config._attn_implementation = "eager"
    model = cls(config).to(dtype).eval()
    # Random init of transformers is small (std 0.02); widen it so attention is far from uniform
    # and a wrong mask or scale would show.
    with torch.no_grad():
        for name_, p in model.named_parameters():
            if p.ndim == 2 and "embed" not in name_ and "wte" not in name_ and "wpe" not in name_:
                p.normal_(0.0, 0.3)
            elif p.ndim == 1 and "norm" not in name_.lower() and "ln" not in name_:
                p.normal_(0.0, 0.1)
    return model
