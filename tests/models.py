"""The one factory of tiny random models, built from configs (no network): ``make_model(name)``.

Two sets of names: ``FAMILIES``, the hand-written adapters (GPT-2, GPT-Neo, BERT, ALBERT and their
head variants), and ``DECLARED_FAMILIES``, the declared families (docs/math.md §1b: Llama, Mistral,
Qwen, Gemma, Falcon, OPT, RoBERTa, ...). Float64 and eager attention unless asked otherwise.
"""

from __future__ import annotations

import torch
import transformers as tf
from transformers import (
    AlbertConfig, AlbertModel, BertConfig, BertForMaskedLM, BertModel, GPT2Config, GPT2LMHeadModel,
    GPT2Model, GPTNeoConfig, GPTNeoForCausalLM, GPTNeoModel,
)

VOCAB = 101


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


#: hand-written adapters: name -> (model class, config factory), one entry per variant the tests cover
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


def make_model(name: str, seed: int = 0, dtype: torch.dtype = torch.float64, *, head: bool = False, **config_kw):
    """A tiny random model: a name of ``FAMILIES`` (the head is in the name; weights widened so that
    attention is far from uniform) or of ``DECLARED_FAMILIES`` (the base model, or with its LM head
    when ``head``; every 1-D parameter randomized). ``config_kw`` overrides the config (``FAMILIES``)."""
    if name in SPECS:
        if config_kw:
            raise TypeError(f"config overrides are not supported for the declared family {name!r}")
        return _declared_model(name, head=head, seed=seed).to(dtype)
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


def saved_model(folder, name: str, dtype: torch.dtype = torch.float32, **kw):
    """``make_model(name, dtype=dtype, **kw)`` saved as a checkpoint in ``folder``; returns it."""
    make_model(name, dtype=dtype, **kw).save_pretrained(folder)
    return folder


# ---- the declared families ----------------------------------------------------------------------


DECLARED_VOCAB = 64
D = 32
_DEC = dict(hidden_size=D, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=DECLARED_VOCAB, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)
_LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 16}

#: declared family -> (config class, config kwargs, causal-LM head class)
SPECS: dict[str, tuple] = {
    "llama": (tf.LlamaConfig, {**_DEC, "attention_bias": True, "rope_parameters": _LLAMA3_ROPE}, tf.LlamaForCausalLM),
    "mistral": (tf.MistralConfig, {**_DEC, "sliding_window": 3}, tf.MistralForCausalLM),
    "mixtral": (tf.MixtralConfig, {**_DEC, "sliding_window": 4, "num_local_experts": 2, "num_experts_per_tok": 1},
                tf.MixtralForCausalLM),
    "qwen2": (tf.Qwen2Config, _DEC, tf.Qwen2ForCausalLM),
    "qwen3": (tf.Qwen3Config, {**_DEC, "head_dim": 8}, tf.Qwen3ForCausalLM),
    "gemma": (tf.GemmaConfig, {**_DEC, "head_dim": 12, "num_key_value_heads": 1}, tf.GemmaForCausalLM),
    "gemma2": (tf.Gemma2Config, {**_DEC, "head_dim": 12, "query_pre_attn_scalar": 10, "attn_logit_softcapping": 5.0,
                                 "final_logit_softcapping": None, "sliding_window": 3}, tf.Gemma2ForCausalLM),
    "gemma3_text": (tf.Gemma3TextConfig, {**_DEC, "head_dim": 12, "query_pre_attn_scalar": 10, "sliding_window": 3,
                                          "layer_types": ["sliding_attention", "full_attention"]},
                    tf.Gemma3ForCausalLM),
    "phi3": (tf.Phi3Config, {**_DEC, "partial_rotary_factor": 0.5}, tf.Phi3ForCausalLM),
    "gpt_neox": (tf.GPTNeoXConfig, dict(hidden_size=D, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                                        vocab_size=DECLARED_VOCAB, max_position_embeddings=64, rotary_pct=0.5,
                                        attention_bias=True, use_parallel_residual=True), tf.GPTNeoXForCausalLM),
    "olmo2": (tf.Olmo2Config, _DEC, tf.Olmo2ForCausalLM),
    "starcoder2": (tf.Starcoder2Config, {**_DEC, "sliding_window": 3, "use_bias": True}, tf.Starcoder2ForCausalLM),
    "phi": (tf.PhiConfig, {**_DEC, "partial_rotary_factor": 0.5, "qk_layernorm": True}, tf.PhiForCausalLM),
    "gpt_bigcode": (tf.GPTBigCodeConfig, dict(n_embd=D, n_layer=2, n_head=4, n_inner=48, vocab_size=DECLARED_VOCAB, n_positions=64,
                                              multi_query=True), tf.GPTBigCodeForCausalLM),
    "gpt_bigcode-mha": (tf.GPTBigCodeConfig, dict(n_embd=D, n_layer=2, n_head=4, n_inner=48, vocab_size=DECLARED_VOCAB,
                                                  n_positions=64, multi_query=False), tf.GPTBigCodeForCausalLM),
    "gptj": (tf.GPTJConfig, dict(n_embd=D, n_layer=2, n_head=4, n_inner=48, vocab_size=DECLARED_VOCAB, n_positions=64, rotary_dim=4),
             tf.GPTJForCausalLM),
    "falcon": (tf.FalconConfig, dict(hidden_size=D, num_hidden_layers=2, num_attention_heads=4, num_kv_heads=2,
                                     vocab_size=DECLARED_VOCAB, new_decoder_architecture=True, bias=True, max_position_embeddings=64),
               tf.FalconForCausalLM),
    "falcon-7b": (tf.FalconConfig, dict(hidden_size=D, num_hidden_layers=2, num_attention_heads=4, vocab_size=DECLARED_VOCAB,
                                        multi_query=True, parallel_attn=True, new_decoder_architecture=False,
                                        max_position_embeddings=64), tf.FalconForCausalLM),
    "bloom": (tf.BloomConfig, dict(hidden_size=D, n_layer=2, n_head=4, vocab_size=DECLARED_VOCAB), tf.BloomForCausalLM),
    "opt": (tf.OPTConfig, dict(hidden_size=D, ffn_dim=48, num_hidden_layers=2, num_attention_heads=4, vocab_size=DECLARED_VOCAB,
                               max_position_embeddings=64, word_embed_proj_dim=D, pad_token_id=1), tf.OPTForCausalLM),
    "opt-postln": (tf.OPTConfig, dict(hidden_size=D, ffn_dim=48, num_hidden_layers=2, num_attention_heads=4,
                                      vocab_size=DECLARED_VOCAB, max_position_embeddings=64, word_embed_proj_dim=D,
                                      pad_token_id=1, do_layer_norm_before=False), tf.OPTForCausalLM),
    "roberta": (tf.RobertaConfig, dict(hidden_size=D, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                                       vocab_size=DECLARED_VOCAB, max_position_embeddings=70, pad_token_id=1),
                tf.RobertaForMaskedLM),
    "xlm-roberta": (tf.XLMRobertaConfig, dict(hidden_size=D, intermediate_size=48, num_hidden_layers=2,
                                              num_attention_heads=4, vocab_size=DECLARED_VOCAB, max_position_embeddings=70,
                                              pad_token_id=1), tf.XLMRobertaForMaskedLM),
    "distilbert": (tf.DistilBertConfig, dict(dim=D, hidden_dim=48, n_layers=2, n_heads=4, vocab_size=DECLARED_VOCAB,
                                             max_position_embeddings=64, pad_token_id=0), tf.DistilBertForMaskedLM),
}
DECLARED_FAMILIES = sorted(SPECS)


def family_config(family: str):
    cls, kw, _ = SPECS[family]
    extra = {"experts_implementation": "eager"} if family == "mixtral" else {}
    return cls(**kw, attn_implementation="eager", **extra)


def _declared_model(family: str, *, head: bool = False, seed: int = 0) -> torch.nn.Module:
    """The base model (or with its LM head), float64, eval, randomized 1-D parameters."""
    torch.manual_seed(seed)
    cfg = family_config(family)
    model = (SPECS[family][2] if head else tf.AutoModel.from_config)
    model = model(cfg) if head else model(cfg)
    model = model.to(torch.float64).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model
