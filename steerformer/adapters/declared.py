"""Families declared as data: one :class:`Family` value per ``model_type`` read by one shared
adapter, :class:`DeclaredAdapter` (the shape of TransformerLens' config fields and its v3
architecture adapters: module paths plus a handful of facts).

Every number comes from ``config`` or from the model's own modules: the rotary embedding module
and ``apply_rotary_pos_emb`` of the family's modeling file, its norm class loaded with the stored
weights, its block forward called with the keyword arguments the model itself passes to it
(captured with a forward pre-hook on one run of the base model).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Sequence

import torch

from ..errors import UnsupportedModelError
from .base import (
    Adapter, AttentionWeights, first_output, hidden_input, MaskSpec, Part, TensorGetter, Writer, split_heads_bias,
    split_heads_out_in, split_output_heads,
)
from .positions import Alibi, family_class, PerTensorRotary, Rotary


def _cfg(name: str | None, default=None) -> Callable:
    return lambda c: default if name is None else getattr(c, name, default)


@dataclasses.dataclass(frozen=True)
class Family:
    """The facts of one family. Module paths: ``layers`` relative to the base model; ``attention``,
    the norms and ``ffn`` relative to a block; the projections relative to the attention module.
    Callables take the config (a fact that depends on it, e.g. GPT-NeoX's parallel residual)."""

    model_type: str
    base_model_prefix: str = "model"
    # config field names
    d_model: str = "hidden_size"
    n_heads: str = "num_attention_heads"
    n_kv_heads: str | Callable | None = "num_key_value_heads"  # field, or config -> H_kv; None: H_kv = H
    n_layers: str = "num_hidden_layers"
    # module paths
    layers: str = "layers"
    attention: str = "self_attn"
    q: str = "q_proj"
    k: str = "k_proj"
    v: str = "v_proj"
    o: str = "o_proj"
    qkv: str | None = None  # fused projection
    qkv_layout: str | Callable = "separate"  # "separate" | "fused" ([Q|K|V] rows) | "interleaved" (per head
    # [q k v]) | "grouped" (per KV head [q…q k v])
    q_norm: str | Callable | None = None  # path, or config -> path or None
    k_norm: str | Callable | None = None
    qk_norm_across_heads: bool = False  # the q/k norm spans all heads' concatenation (OLMo-2)
    pre_attention_norm: Callable = _cfg(None, "input_layernorm")  # config -> path in the block or None
    ffn: str = "mlp"  # zeroed for "without FFN"
    ffn_norm_after: Callable = _cfg(None)  # post-LN: the norm after the FFN residual (identity without FFN)
    ffn_adds_residual: bool = False  # the FFN module returns residual + mlp(x) itself (BLOOM: mlp(x, residual))
    kwargs_per_batch: bool = False  # a block keyword argument has the batch folded in (BLOOM's alibi)
    final_norm: Callable = _cfg(None, "norm")  # config -> path in the base model or None
    # facts
    norm_kind: str = "rmsnorm"
    norm_class: str | None = "RMSNorm"  # class-name suffix in the modeling module; None: nn.LayerNorm
    norm_eps: str = "rms_norm_eps"
    position_kind: str = "rotary"
    rotary: type = Rotary  # positions class: Rotary, PerTensorRotary (GPT-J) or Alibi (BLOOM)
    residual: Callable = _cfg(None, "pre")
    biases: Callable = _cfg(None, "")  # config -> which of "qkvo" have a bias
    scale_field: str | None = None  # scale = config.<field> ** -0.5 (Gemma-2/3); else d_h ** -0.5
    softcap_field: str | None = None
    causal: bool = True
    supported: Callable = _cfg(None, None)  # config -> None, or why this config is refused
    # residual-stream writers (docs/math.md §5e): the MLP's output projection (relative to a block) and
    # whether it has a bias; the RMS norms applied to the attention and MLP writes before the
    # residual add (Gemma-2/3 sandwich, OLMo-2); the embeddings (relative to the base model)
    mlp_writer: Writer = Writer("mlp", "mlp.down_proj")
    mlp_bias: Callable = _cfg(None, False)
    output_norms: tuple[str, str] | None = None
    embeddings: tuple[Writer, ...] = (Writer("embedding", "embed_tokens", layout="in_out"),)


def _fact(value, config):
    """A declared fact: a value, or a function of the config."""
    return value(config) if callable(value) else value


class _Stop(Exception):
    pass


class DeclaredAdapter(Adapter):
    """The adapter of every :class:`Family`; a family is a ``Family(...)`` value, not code."""

    family: Family

    def __init__(self, config) -> None:
        super().__init__(config)
        why = self.family.supported(config)
        if why:
            raise UnsupportedModelError(f"{self.family.model_type}: {why}")
        self._rotary: dict = {}

    # declared facts, as class attributes of the base interface
    @property
    def position_kind(self) -> str:  # type: ignore[override]
        return self.family.position_kind

    @property
    def norm_kind(self) -> str:  # type: ignore[override]
        return self.family.norm_kind

    @property
    def residual(self) -> str:  # type: ignore[override]
        return self.family.residual(self.config)

    @property
    def qkv_layout(self) -> str:  # type: ignore[override]
        return _fact(self.family.qkv_layout, self.config)

    # ---- shape facts -------------------------------------------------------------------------
    @property
    def d_model(self) -> int:
        return int(getattr(self.config, self.family.d_model))

    @property
    def n_heads(self) -> int:
        return int(getattr(self.config, self.family.n_heads))

    @property
    def n_kv_heads(self) -> int:
        f = self.family.n_kv_heads
        v = f(self.config) if callable(f) else None if f is None else getattr(self.config, f, None)
        return self.n_heads if v is None else int(v)

    @property
    def head_dim(self) -> int:
        v = getattr(self.config, "head_dim", None)
        return int(v) if v else self.d_model // self.n_heads

    @property
    def norm_eps(self) -> float:
        return float(getattr(self.config, self.family.norm_eps, 1e-5))

    def slots(self) -> list[str]:
        n = int(getattr(self.config, self.family.n_layers))
        return [f"{self.family.layers}.{i}.{self.family.attention}" for i in range(n)]

    def layer_block(self, slot: int) -> str:
        return f"{self.family.layers}.{slot}"

    def _layer_type(self, layer: int) -> str | None:
        types = getattr(self.config, "layer_types", None)
        return None if not types else types[layer]

    def mask(self, layer: int) -> MaskSpec:
        if not self.family.causal:
            return MaskSpec("full")
        window = getattr(self.config, "sliding_window", None)
        kind = self._layer_type(layer)
        # With layer_types only "sliding_attention" layers slide (Gemma-2/3, Qwen); without, a set
        # sliding_window applies to every layer (Mistral, Mixtral, Phi-3).
        if window and (kind is None or kind == "sliding_attention"):
            return MaskSpec("causal_local", window=int(window))
        return MaskSpec("causal")

    def scale(self, layer: int) -> float:
        if self.family.scale_field is not None:
            return float(getattr(self.config, self.family.scale_field)) ** -0.5
        return 1.0 / math.sqrt(self.head_dim)

    def softcap(self) -> float | None:
        v = None if self.family.softcap_field is None else getattr(self.config, self.family.softcap_field, None)
        return None if v is None else float(v)

    # ---- weights -----------------------------------------------------------------------------
    def _proj(self, slot: int, which: str) -> str:
        return f"{self.slots()[slot]}.{getattr(self.family, which)}"

    def _split_fused(self, t: torch.Tensor) -> dict[str, torch.Tensor]:
        """Q, K, V rows of a fused projection weight (rows × d) or bias (rows,)."""
        H, G, dh = self.n_heads, self.n_kv_heads, self.head_dim
        if self.qkv_layout == "interleaved":  # per head [q k v] (GPT-NeoX)
            parts = t.reshape(H, 3, dh, *t.shape[1:])
            return {n: parts[:, i].reshape(H * dh, *t.shape[1:]) for i, n in enumerate("qkv")}
        if self.qkv_layout == "grouped":  # per KV head [q ... q k v] (Falcon's new decoder architecture)
            parts = t.reshape(G, H // G + 2, dh, *t.shape[1:])
            return {"q": parts[:, :-2].reshape(H * dh, *t.shape[1:]), "k": parts[:, -2].reshape(G * dh, *t.shape[1:]),
                    "v": parts[:, -1].reshape(G * dh, *t.shape[1:])}
        q, k, v = torch.split(t, [H * dh, G * dh, G * dh], dim=0)  # [Q | K | V] (Phi-3)
        return {"q": q, "k": k, "v": v}

    def _norm(self, path: str, dim: int, get: TensorGetter) -> torch.nn.Module:
        """The family's norm class with the model's ε, loaded with the stored weight (and bias)."""
        cls = torch.nn.LayerNorm if self.family.norm_class is None else family_class(self.config, self.family.norm_class)
        mod = cls(dim, eps=self.norm_eps)
        state = {name: get(f"{path}.{name}") for name, _ in mod.named_parameters()}
        mod.to(dtype=next(iter(state.values())).dtype)  # the stored precision, not float32 by default
        with torch.no_grad():
            for name, value in state.items():
                mod.get_parameter(name).copy_(value)
        return mod.eval()

    def read_attention(self, layer: int, get: TensorGetter, parts: Sequence[Part] = ("qk", "vo")) -> AttentionWeights:
        slot = self.layer_sequence()[layer]
        H, G = self.n_heads, self.n_kv_heads
        biases = self.family.biases(self.config)
        want = "qkv" if "qk" in parts else "v"
        if self.qkv_layout == "separate":
            W = {n: get(f"{self._proj(slot, n)}.weight") for n in want}
            b = {n: get(f"{self._proj(slot, n)}.bias") if n in biases else None for n in want}
        else:
            name = self._proj(slot, "qkv")
            W = self._split_fused(get(f"{name}.weight"))
            b = self._split_fused(get(f"{name}.bias")) if "v" in biases else dict.fromkeys("qkv")
        o = self._proj(slot, "o")
        out = AttentionWeights(
            W_V=split_heads_out_in(W["v"], G), b_V=split_heads_bias(b["v"], G),
            W_O=split_output_heads(get(f"{o}.weight"), H), b_O=get(f"{o}.bias") if "o" in biases else None,
            scale=self.scale(layer), mask=self.mask(layer), softcap=self.softcap(),
        )
        if "qk" in parts:
            out.W_Q, out.b_Q = split_heads_out_in(W["q"], H), split_heads_bias(b["q"], H)
            out.W_K, out.b_K = split_heads_out_in(W["k"], G), split_heads_bias(b["k"], G)
            qn, kn = _fact(self.family.q_norm, self.config), _fact(self.family.k_norm, self.config)
            if qn is not None:
                p = self.slots()[slot]
                if self.family.qk_norm_across_heads:
                    out.q_norm = _AcrossHeads(self._norm(f"{p}.{qn}", H * self.head_dim, get))
                    out.k_norm = _AcrossHeads(self._norm(f"{p}.{kn}", G * self.head_dim, get))
                else:
                    out.q_norm = self._norm(f"{p}.{qn}", self.head_dim, get)
                    out.k_norm = self._norm(f"{p}.{kn}", self.head_dim, get)
            if self.family.position_kind in ("rotary", "alibi"):
                out.positions = self.family.rotary.for_config(self.config, self._layer_type(layer), cache=self._rotary,
                                                              n_heads=H)
        return out

    def output_weight_name(self, slot: int) -> str:
        return f"{self._proj(slot, 'o')}.weight"

    def block_writers(self, slot: int) -> list[Writer]:
        f, c = self.family, self.config
        attn_norm, mlp_norm = f.output_norms or (None, None)
        kind = f.norm_kind if f.output_norms else None
        attn = Writer("attention", f"{f.attention}.{f.o}", bias="o" in f.biases(c), norm=attn_norm, norm_kind=kind)
        mlp = dataclasses.replace(f.mlp_writer, bias=bool(f.mlp_bias(c)), norm=mlp_norm, norm_kind=kind)
        return [w.at(self.layer_block(slot), slot) for w in (attn, mlp)]

    def embedding_writers(self) -> list[Writer]:
        return list(self.family.embeddings)

    def attention_module_output(self, slot: int) -> str:
        return self._proj(slot, "o")

    def pre_attention_norm(self, layer: int) -> str | None:
        name = self.family.pre_attention_norm(self.config)
        return None if name is None else f"{self.layer_block(self.layer_sequence()[layer])}.{name}"

    def pre_attention_norm_module(self, layer: int, get: TensorGetter) -> torch.nn.Module | None:
        path = self.pre_attention_norm(layer)
        return None if path is None else self._norm(path, self.d_model, get)

    # ---- running the model block by block ----------------------------------------------------
    def blocks(self, base: torch.nn.Module) -> list[torch.nn.Module]:
        layers = base.get_submodule(self.family.layers)
        return [layers[s] for s in self.layer_sequence()]

    def final_norm(self, base: torch.nn.Module) -> torch.nn.Module | None:
        name = self.family.final_norm(self.config)
        return None if name is None else base.get_submodule(name)

    def _run_base(self, base: torch.nn.Module, input_ids: torch.Tensor) -> None:
        kw = {"use_cache": False} if self.family.causal else {}
        base(input_ids=input_ids, **kw)

    def embed(self, base: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
        """The model's own embedding path (position offsets, embedding scale, projections): the
        hidden states its first block receives, captured with a forward pre-hook."""
        seen: dict = {}

        def hook(module, args, kwargs):
            seen["h"] = hidden_input(args, kwargs)
            raise _Stop

        handle = self.blocks(base)[0].register_forward_pre_hook(hook, with_kwargs=True)
        try:
            self._run_base(base, input_ids)
        except _Stop:
            pass
        finally:
            handle.remove()
        return seen["h"]

    def block_inputs(self, base: torch.nn.Module, n: int, dtype: torch.dtype,
                     device: torch.device | str | None = None) -> list:
        """The positional and keyword arguments (besides the hidden states) the model passes each
        block for ``n`` tokens — rotary cos/sin, the per-layer 4-D mask incl. sliding windows —
        captured with forward pre-hooks on one run of the base model on ``n`` dummy tokens."""
        if self.family.kwargs_per_batch:
            shared = {"capture": lambda b: self._capture(base, n, device, b), "by_batch": {}}
            return [_PerBatch(shared, k) for k in range(self.n_layers)]
        return self._capture(base, n, device, 1)

    def _capture(self, base: torch.nn.Module, n: int, device, batch: int) -> list:
        blocks = self.blocks(base)
        seen: dict[int, tuple] = {}

        def make_hook(k: int):
            def hook(module, args, kwargs):
                if k not in seen:
                    rest = dict(kwargs)
                    rest.pop("hidden_states", None)
                    seen[k] = (tuple(args[1:]), rest)
            return hook

        handles = [b.register_forward_pre_hook(make_hook(k), with_kwargs=True) for k, b in enumerate(blocks)]
        try:
            with torch.no_grad():
                self._run_base(base, torch.zeros((batch, n), dtype=torch.long, device=device))
        finally:
            for h in handles:
                h.remove()
        return [seen[k] for k in range(len(blocks))]

    def run_block(self, block: torch.nn.Module, hidden: torch.Tensor, inputs, *, ffn: bool = True) -> torch.Tensor:
        if isinstance(inputs, _PerBatch):
            inputs = inputs.get(hidden.shape[0])
        args, kwargs = inputs if isinstance(inputs, tuple) else ((), {})
        if ffn:
            return first_output(block(hidden, *args, **kwargs))
        # "Without FFN": the block's own forward with the FFN's output replaced by zeros, so its
        # residual term vanishes (sequential, sandwich and parallel residuals alike: a parallel
        # block keeps x + attn(ln₁x)); post-LN also skips the norm that follows the FFN residual.
        drop = _residual_input if self.family.ffn_adds_residual else _zero_output
        hooks = [block.get_submodule(self.family.ffn).register_forward_hook(drop)]
        after = self.family.ffn_norm_after(self.config)
        if after is not None:
            hooks.append(block.get_submodule(after).register_forward_hook(lambda m, i, o: i[0]))
        try:
            return first_output(block(hidden, *args, **kwargs))
        finally:
            for h in hooks:
                h.remove()


class _AcrossHeads(torch.nn.Module):
    """Applies a norm of width heads·d_h to per-head tensors (..., heads, n, d_h)."""

    def __init__(self, norm: torch.nn.Module) -> None:
        super().__init__()
        self.norm = norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        *lead, h, n, dh = x.shape
        y = self.norm(x.transpose(-3, -2).reshape(*lead, n, h * dh))
        return y.reshape(*lead, n, h, dh).transpose(-3, -2)


class _PerBatch:
    """One block's captured arguments, captured again for each batch size (shared across blocks)."""

    def __init__(self, shared: dict, k: int) -> None:
        self.shared, self.k = shared, k

    def get(self, batch: int) -> tuple:
        by_batch = self.shared["by_batch"]
        if batch not in by_batch:
            by_batch.clear()  # one batch size at a time: keep memory flat
            by_batch[batch] = self.shared["capture"](batch)
        return by_batch[batch][self.k]


def _residual_input(module, inputs, output):
    return inputs[1]


def _zero_output(module, inputs, output):
    if isinstance(output, (tuple, list)):
        return type(output)([torch.zeros_like(output[0]), *output[1:]])
    return torch.zeros_like(output)


def declare(family: Family) -> type[DeclaredAdapter]:
    """The adapter class of one family (registered by ``family.model_type``)."""
    name = "".join(p.capitalize() for p in family.model_type.replace("-", "_").split("_")) + "Adapter"
    return type(name, (DeclaredAdapter,), {"family": family, "model_type": family.model_type,
                                           "base_model_prefix": family.base_model_prefix})


def _qkvo_if(field: str) -> Callable:
    return lambda c: "qkvo" if getattr(c, field, False) else ""


def _flag(field: str) -> Callable:
    return lambda c: bool(getattr(c, field, False))


def _embeddings(*names: tuple[str, str], norm: str | None = None) -> tuple[Writer, ...]:
    """Embedding writers (kind, path); ``norm``: a LayerNorm their sum passes first."""
    return tuple(Writer(kind, path, layout="in_out", norm=norm, norm_kind="layernorm" if norm else None)
                 for kind, path in names)


_SANDWICH = ("post_attention_layernorm", "post_feedforward_layernorm")


def _falcon_kv_heads(c) -> int:
    if c.new_decoder_architecture:
        return int(c.num_kv_heads)
    return 1 if c.multi_query else int(c.num_attention_heads)


def _falcon_two_norms(c) -> bool:
    # FalconDecoderLayer sets num_ln_in_parallel_attn = 2 when it is None on the new architecture.
    return bool(c.new_decoder_architecture) and (c.num_ln_in_parallel_attn or 2) == 2


# ---- the families ----------------------------------------------------------------------------
LLAMA = Family("llama", biases=_qkvo_if("attention_bias"), mlp_bias=_flag("mlp_bias"))
FAMILIES: tuple[Family, ...] = (
    LLAMA,
    dataclasses.replace(LLAMA, model_type="mistral", biases=_cfg(None, "")),
    dataclasses.replace(LLAMA, model_type="mixtral", biases=_cfg(None, ""),
                        mlp_writer=Writer("mlp", "mlp.experts", layout="experts", parameter="down_proj", output="mlp")),
    dataclasses.replace(LLAMA, model_type="qwen2", biases=_cfg(None, "qkv")),
    dataclasses.replace(LLAMA, model_type="qwen3", q_norm="q_norm", k_norm="k_norm"),
    dataclasses.replace(LLAMA, model_type="gemma", norm_kind="rmsnorm+1"),
    dataclasses.replace(LLAMA, model_type="gemma2", norm_kind="rmsnorm+1", residual=_cfg(None, "sandwich"),
                        scale_field="query_pre_attn_scalar", softcap_field="attn_logit_softcapping",
                        output_norms=_SANDWICH),
    dataclasses.replace(LLAMA, model_type="gemma3_text", norm_kind="rmsnorm+1", residual=_cfg(None, "sandwich"),
                        scale_field="query_pre_attn_scalar", softcap_field="attn_logit_softcapping",
                        q_norm="q_norm", k_norm="k_norm", output_norms=_SANDWICH),
    dataclasses.replace(LLAMA, model_type="phi3", qkv="qkv_proj", qkv_layout="fused", biases=_cfg(None, "")),
    Family("gpt_neox", base_model_prefix="gpt_neox", n_kv_heads=None, attention="attention", qkv="query_key_value",
           qkv_layout="interleaved", o="dense", final_norm=_cfg(None, "final_layer_norm"),
           norm_kind="layernorm", norm_class=None, norm_eps="layer_norm_eps",
           residual=lambda c: "parallel" if getattr(c, "use_parallel_residual", True) else "pre",
           biases=_qkvo_if("attention_bias"), mlp_writer=Writer("mlp", "mlp.dense_4h_to_h"), mlp_bias=_cfg(None, True),
           embeddings=_embeddings(("embedding", "embed_in"))),
    dataclasses.replace(LLAMA, model_type="olmo2", pre_attention_norm=_cfg(None), residual=_cfg(None, "norm-after"),
                        q_norm="q_norm", k_norm="k_norm", qk_norm_across_heads=True, output_norms=_SANDWICH),
    dataclasses.replace(LLAMA, model_type="starcoder2", norm_kind="layernorm", norm_class=None, norm_eps="norm_epsilon",
                        biases=_qkvo_if("use_bias"), mlp_writer=Writer("mlp", "mlp.c_proj"), mlp_bias=_flag("use_bias")),
    dataclasses.replace(LLAMA, model_type="phi", o="dense", final_norm=_cfg(None, "final_layernorm"),
                        norm_kind="layernorm", norm_class=None, norm_eps="layer_norm_eps", residual=_cfg(None, "parallel"),
                        biases=_cfg(None, "qkvo"), q_norm=lambda c: "q_layernorm" if c.qk_layernorm else None,
                        k_norm=lambda c: "k_layernorm" if c.qk_layernorm else None,
                        mlp_writer=Writer("mlp", "mlp.fc2"), mlp_bias=_cfg(None, True)),
    Family("gpt_bigcode", base_model_prefix="transformer", d_model="n_embd", n_heads="n_head",
           n_kv_heads=lambda c: 1 if c.multi_query else c.n_head, n_layers="n_layer", layers="h", attention="attn",
           qkv="c_attn", qkv_layout=lambda c: "fused" if c.multi_query else "interleaved", o="c_proj",
           pre_attention_norm=_cfg(None, "ln_1"), final_norm=_cfg(None, "ln_f"), norm_kind="layernorm",
           norm_class=None, norm_eps="layer_norm_epsilon", position_kind="learned", biases=_cfg(None, "qkvo"),
           supported=lambda c: None if c.scale_attn_weights else "scale_attn_weights=False is not supported",
           mlp_writer=Writer("mlp", "mlp.c_proj"), mlp_bias=_cfg(None, True),
           embeddings=_embeddings(("embedding", "wte"), ("positions", "wpe"))),
    Family("gptj", base_model_prefix="transformer", d_model="n_embd", n_heads="n_head", n_kv_heads=None,
           n_layers="n_layer", layers="h", attention="attn", o="out_proj", pre_attention_norm=_cfg(None, "ln_1"),
           final_norm=_cfg(None, "ln_f"), norm_kind="layernorm", norm_class=None, norm_eps="layer_norm_epsilon",
           rotary=PerTensorRotary, residual=_cfg(None, "parallel"),
           supported=lambda c: None if c.rotary_dim else "rotary_dim=None is not supported",
           mlp_writer=Writer("mlp", "mlp.fc_out"), mlp_bias=_cfg(None, True), embeddings=_embeddings(("embedding", "wte"))),
    Family("falcon", base_model_prefix="transformer", n_kv_heads=_falcon_kv_heads, layers="h",
           attention="self_attention", qkv="query_key_value", o="dense",
           qkv_layout=lambda c: "grouped" if c.new_decoder_architecture else "fused" if c.multi_query else "interleaved",
           pre_attention_norm=lambda c: "ln_attn" if _falcon_two_norms(c) else "input_layernorm",
           final_norm=_cfg(None, "ln_f"), norm_kind="layernorm", norm_class=None, norm_eps="layer_norm_epsilon",
           residual=lambda c: "parallel" if c.parallel_attn or c.new_decoder_architecture else "pre",
           biases=_qkvo_if("bias"), supported=lambda c: "alibi=True is not supported (rotary Falcons are)" if c.alibi
           else None, mlp_writer=Writer("mlp", "mlp.dense_4h_to_h"), mlp_bias=_flag("bias"),
           embeddings=_embeddings(("embedding", "word_embeddings"))),
    Family("bloom", base_model_prefix="transformer", n_heads="n_head", n_kv_heads=None, n_layers="n_layer", layers="h",
           attention="self_attention", qkv="query_key_value", qkv_layout="interleaved", o="dense",
           final_norm=_cfg(None, "ln_f"), norm_kind="layernorm", norm_class=None, norm_eps="layer_norm_epsilon",
           position_kind="alibi", rotary=Alibi, biases=_cfg(None, "qkvo"), ffn_adds_residual=True,
           kwargs_per_batch=True,
           supported=lambda c: "apply_residual_connection_post_layernorm=True is not supported"
           if c.apply_residual_connection_post_layernorm else None,
           mlp_writer=Writer("mlp", "mlp.dense_4h_to_h"), mlp_bias=_cfg(None, True),
           embeddings=_embeddings(("embedding", "word_embeddings"), norm="word_embeddings_layernorm")),
    Family("opt", n_kv_heads=None, layers="decoder.layers", o="out_proj", ffn="fc2",
           pre_attention_norm=lambda c: "self_attn_layer_norm" if c.do_layer_norm_before else None,
           ffn_norm_after=lambda c: None if c.do_layer_norm_before else "final_layer_norm",
           final_norm=lambda c: "decoder.final_layer_norm" if c.do_layer_norm_before else None,
           norm_kind="layernorm", norm_class=None, norm_eps="layer_norm_eps", position_kind="learned",
           residual=lambda c: "pre" if c.do_layer_norm_before else "post", biases=_qkvo_if("enable_bias"),
           supported=lambda c: None if getattr(c, "word_embed_proj_dim", c.hidden_size) == c.hidden_size else
           f"word_embed_proj_dim={c.word_embed_proj_dim} != hidden_size={c.hidden_size} (OPT-350m's "
           "project_in/project_out) is not supported; every other OPT size is",
           mlp_writer=Writer("mlp", "fc2"), mlp_bias=_flag("enable_bias"),
           embeddings=_embeddings(("embedding", "decoder.embed_tokens"), ("positions", "decoder.embed_positions"))),
    Family("distilbert", base_model_prefix="distilbert", d_model="dim", n_heads="n_heads", n_kv_heads=None,
           n_layers="n_layers", layers="transformer.layer", attention="attention", q="q_lin", k="k_lin", v="v_lin",
           o="out_lin", pre_attention_norm=_cfg(None), ffn="ffn", ffn_norm_after=_cfg(None, "output_layer_norm"),
           final_norm=_cfg(None), norm_kind="layernorm", norm_class=None, norm_eps="layer_norm_eps",
           position_kind="learned", residual=_cfg(None, "post"), biases=_cfg(None, "qkvo"), causal=False,
           mlp_writer=Writer("mlp", "ffn.lin2"), mlp_bias=_cfg(None, True),
           embeddings=_embeddings(("embedding", "embeddings.word_embeddings"),
                                  ("positions", "embeddings.position_embeddings"), norm="embeddings.LayerNorm")),
)

DECLARED: tuple[type[DeclaredAdapter], ...] = tuple(declare(f) for f in FAMILIES)
