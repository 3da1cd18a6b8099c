"""The one interface every architecture adapter implements, and the canonical weight layout.

Canonical layout (the papers' convention: tokens are column vectors, a linear map is y = W x + b):

    W_Q           : (H, d_h, d)     head h computes q_h = W_Q[h] x + b_Q[h]
    W_K, W_V      : (H_kv, d_h, d)  grouped-query: query head h reads key/value head g(h) = h·H_kv // H
    b_Q           : (H, d_h);  b_K, b_V : (H_kv, d_h)
    W_O           : (H, d, d_h)     attention output = sum_h W_O[h] z_h + b_O
    b_O           : (d,)

so the layer matrix of docs/math.md §1/§1b is F = sum_h W_O[h] @ W_V[g(h)] (H_kv = H: one KV head per
query head; d_h need not be d/H). Adapters convert from each
family's storage (``nn.Linear`` is (out, in); GPT-2's ``Conv1D`` is (in, out); fused QKV...) in
exactly one place, and convert back for the write of the output weight.
"""

from __future__ import annotations

import abc
import copy
import dataclasses
from typing import Any, Callable, ClassVar, Literal, Sequence

import torch

from ..errors import InvalidArgumentError

# Reads one tensor from wherever the weights live (a model in memory, a safetensors file...).
# Keys are relative to the base model (no ``transformer.`` / ``bert.`` head-class prefix).
TensorGetter = Callable[[str], torch.Tensor]

MaskKind = Literal["full", "causal", "causal_local"]
Part = Literal["qk", "vo"]


@dataclasses.dataclass(frozen=True)
class MaskSpec:
    """Which keys a query may attend to.

    ``causal_local``: query i sees keys j with i - window < j <= i (GPT-Neo local layers).
    """

    kind: MaskKind
    window: int | None = None

    def allowed(self, n: int, device: torch.device | str | None = None) -> torch.Tensor:
        """Boolean (n, n) matrix, True where query i may attend to key j."""
        if self.kind == "full":
            return torch.ones(n, n, dtype=torch.bool, device=device)
        i = torch.arange(n, device=device)[:, None]
        j = torch.arange(n, device=device)[None, :]
        ok = j <= i
        if self.kind == "causal_local":
            ok = ok & (i - j < int(self.window or 0))
        return ok

    def to_dict(self) -> dict:
        return {"kind": self.kind, "window": self.window}


@dataclasses.dataclass
class AttentionWeights:
    """One attention module's weights in the canonical layout. Q/K fields are ``None`` when only
    the value/output part was read (the lazy layer-matrix path never reads Q/K)."""

    W_V: torch.Tensor
    b_V: torch.Tensor | None
    W_O: torch.Tensor
    b_O: torch.Tensor | None
    scale: float
    mask: MaskSpec
    W_Q: torch.Tensor | None = None
    b_Q: torch.Tensor | None = None
    W_K: torch.Tensor | None = None
    b_K: torch.Tensor | None = None
    #: how scores see positions (rotary, ALiBi); None: they do not (learned absolute positions
    #: enter through the embeddings, before any layer). See ``positions.py``.
    positions: Any = None
    #: the model's own query/key norm modules (Qwen3, OLMo-2, Gemma-3), applied per head to
    #: W_Q x + b_Q and W_K x + b_K before the rotation
    q_norm: torch.nn.Module | None = None
    k_norm: torch.nn.Module | None = None
    #: score soft-cap c (Gemma-2): s <- c·tanh(s/c)
    softcap: float | None = None

    @property
    def n_heads(self) -> int:
        return int(self.W_O.shape[0])

    @property
    def n_kv_heads(self) -> int:
        return int(self.W_V.shape[0])

    @property
    def d_model(self) -> int:
        return int(self.W_V.shape[2])

    def kv_index(self) -> torch.Tensor:
        """g(h) for every query head h: the key/value head it reads (transformers' repeat_kv)."""
        return torch.arange(self.n_heads, device=self.W_V.device) * self.n_kv_heads // self.n_heads

    def value_heads(self) -> torch.Tensor:
        """W_V repeated to one entry per query head, (H, d_h, d) (a view when H_kv = H)."""
        return self.W_V if self.n_kv_heads == self.n_heads else self.W_V[self.kv_index()]

    def value_bias_heads(self) -> torch.Tensor | None:
        """b_V repeated to one block per query head and flattened, (H·d_h,) — the bias that pairs
        with :meth:`value_matrix` (so a·b_V is defined for a row a of length H·d_h); None without one."""
        if self.b_V is None:
            return None
        b = self.b_V if self.n_kv_heads == self.n_heads else self.b_V[self.kv_index()]
        return b.reshape(-1)

    def grouped_output(self) -> torch.Tensor:
        """Σ_{h: g(h)=g} W_O[h] for each KV head g, (H_kv, d, d_h): the output weight F sees."""
        if self.n_kv_heads == self.n_heads:
            return self.W_O
        A, _ = self.layer_factors()
        return A.reshape(A.shape[0], self.n_kv_heads, -1).permute(1, 0, 2)

    def head_matrices(self) -> torch.Tensor:
        """Per-head layer matrices M_h = W_O[h] W_V[g(h)], shape (H, d, d)."""
        return torch.einsum("hdk,hke->hde", self.W_O, self.value_heads())

    def layer_matrix(self) -> torch.Tensor:
        """F = W_O · V = sum_h W_O[h] W_V[g(h)], shape (d, d). With grouped-query heads the heads
        sharing a KV head are summed on the output side first (F = A B, one GEMM), so each KV
        head's value map enters once and the repeated heads are never formed."""
        if self.n_kv_heads == self.n_heads:
            return torch.einsum("hdk,hke->de", self.W_O, self.W_V)
        A, B = self.layer_factors()
        return A @ B

    def layer_factors(self, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(A, B) with F = A @ B: A = W_O·R (d × r), B = W_V stacked (r × d), r = H_kv·d_h.
        Column block g of A is Σ_{h: g(h)=g} W_O[h] (docs/math.md §1b, factored spectra); the query
        heads of one KV head are consecutive (g(h) = h·H_kv // H), so A is a reshape and a sum of
        the stored (d, H·d_h) output weight. ``dtype``: the factors' dtype, the sum accumulated
        in it straight from the stored weights (bf16 weights are never copied whole to float)."""
        H, G = self.n_heads, self.n_kv_heads
        d, dh = self.W_O.shape[1], self.W_O.shape[2]
        dtype = dtype or self.W_O.dtype
        O = self.W_O.permute(1, 0, 2)  # (d, H, d_h): a view of the stored output weight
        if G == H:
            A = O.reshape(d, H * dh).to(dtype)
        elif H % G == 0:  # transformers' repeat_kv: always
            # One in-place add per head of a group, each converting on the fly: the fastest of the
            # sums measured (benchmarks/bench_families.py), and no whole copy of W_O in ``dtype``.
            heads = O.reshape(d, G, H // G, dh)
            A = torch.empty((d, G, dh), dtype=dtype, device=O.device)
            A.copy_(heads[:, :, 0])
            for j in range(1, H // G):
                A.add_(heads[:, :, j])
        else:  # uneven groups (no transformers model has them): the same sum by index
            A = torch.zeros((d, G, dh), dtype=dtype, device=O.device)
            A.index_add_(1, self.kv_index(), O.to(dtype))
        return A.reshape(d, G * dh), self.W_V.reshape(G * dh, d).to(dtype)

    def output_bias(self) -> torch.Tensor:
        """The constant the value/output path adds to every token: W_O b_V + b_O.

        Exact because every attention row sums to one: sum_j A_ij (V x_j + b_V) = V (A x)_i + b_V.
        """
        out = torch.zeros(self.d_model, dtype=self.W_V.dtype, device=self.W_V.device)
        if self.b_V is not None:
            out = out + torch.einsum("gdk,gk->d", self.grouped_output(), self.b_V)
        if self.b_O is not None:
            out = out + self.b_O
        return out

    def output_matrix(self) -> torch.Tensor:
        """W_O concatenated over heads, (d, H·d_h): column block h multiplies head h's output."""
        return torch.cat(list(self.W_O), dim=1)

    def value_matrix(self) -> torch.Tensor:
        """V stacked over query heads, (H·d_h, d): row block h is the value map head h reads,
        W_V[g(h)]; F = output_matrix() @ value_matrix(). Square only when H_kv = H and H·d_h = d."""
        return torch.cat(list(self.value_heads()), dim=0)

    def to(self, dtype: torch.dtype | None = None, device: torch.device | str | None = None) -> "AttentionWeights":
        conv = lambda t: None if t is None else t.to(dtype=dtype, device=device)  # noqa: E731
        changes = {f.name: conv(getattr(self, f.name)) for f in dataclasses.fields(self)
                   if isinstance(getattr(self, f.name), torch.Tensor)}
        changes.update({name: copy.deepcopy(mod).to(dtype=dtype, device=device) for name in ("q_norm", "k_norm")
                        if (mod := getattr(self, name)) is not None})
        if self.positions is not None:
            changes["positions"] = self.positions.to(device=device)
        return dataclasses.replace(self, **changes)


#: what a residual-stream writer is: the attention output, the MLP's output projection, the token
#: embedding, the learned position and token-type embeddings
WRITER_KINDS = ("attention", "mlp", "embedding", "positions", "token_type")
#: how a writer's weight is stored: "out_in" (``nn.Linear``: (out, in)); "in_out" (GPT-2's ``Conv1D``,
#: and ``nn.Embedding``, whose row t is token t's output vector); "experts" ((E, out, in): one
#: ``nn.Linear``-like matrix per expert of a mixture-of-experts block)
WRITER_LAYOUTS = ("out_in", "in_out", "experts")


@dataclasses.dataclass(frozen=True)
class Writer:
    """One module that writes into the residual stream, as a family declares it (docs/math.md §5e).

    Canonically the write is y = W z + b with W of shape (d_model, in): column j of W is what input
    coordinate j writes (for an embedding, token j's vector). ``module`` holds the weight
    ``parameter`` (and the bias ``bias`` when it has one); ``output`` is the module whose forward
    output is the write itself (default ``module``; a mixture-of-experts block for stacked
    experts); ``norm`` is a norm applied to this write before it is added to the residual stream
    (Gemma-2/3's and OLMo-2's post-sublayer RMS norms, the LayerNorm after BERT's embeddings), of
    ``norm_kind`` "rmsnorm" (x/rms(x)·w), "rmsnorm+1" (·(1+w)) or "layernorm". Paths are relative
    to the block (``Adapter.layer_block(slot)``) as declared, and to the base model once resolved
    (:meth:`at`); ``slot`` is the block's weight slot (None for embeddings)."""

    kind: str
    module: str
    layout: str = "out_in"
    bias: bool = False
    parameter: str = "weight"
    output: str | None = None
    norm: str | None = None
    norm_kind: str | None = None
    slot: int | None = None

    @property
    def weight(self) -> str:
        """The stored weight's name, relative to the base model once resolved."""
        return f"{self.module}.{self.parameter}"

    @property
    def bias_name(self) -> str | None:
        return f"{self.module}.bias" if self.bias else None

    @property
    def output_module(self) -> str:
        return self.output or self.module

    @property
    def transposed(self) -> bool:
        """Whether the stored matrix is Wᵀ (one row per input coordinate)."""
        return self.layout == "in_out"

    def at(self, prefix: str | None, slot: int | None = None) -> "Writer":
        """This declaration with its paths under ``prefix`` (a block's path) and its slot set."""
        def under(path: str | None) -> str | None:
            return None if path is None or not prefix else f"{prefix}.{path}"

        return dataclasses.replace(self, module=under(self.module), output=under(self.output), norm=under(self.norm),
                                   slot=slot)

    def canonical(self, stored: torch.Tensor) -> torch.Tensor:
        """The stored weight (one expert's slice for "experts") as W, (d_model, in)."""
        return stored.T if self.transposed else stored

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def first_output(out):
    """A module's main output: transformers 4.x blocks return tuples, 5.x ones a bare tensor."""
    return out[0] if isinstance(out, (tuple, list)) else out


def hidden_input(args: tuple, kwargs: dict):
    """A block's (or a module's) hidden-state input as a pre-hook sees it: the first positional
    argument, else the ``hidden_states`` keyword."""
    return args[0] if args else kwargs["hidden_states"]


def config_positions(config: Any) -> int | None:
    """How many positions a model's config says its position embedding holds (None: no limit known)."""
    found = (getattr(config, name, None) for name in ("max_position_embeddings", "n_positions"))
    return next((int(v) for v in found if v is not None), None)


def split_heads_out_in(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(H·d_h, d) row-stacked projection → (H, d_h, d): rows h·d_h:(h+1)·d_h belong to head h."""
    return weight.reshape(n_heads, weight.shape[0] // n_heads, weight.shape[1])


def split_heads_bias(bias: torch.Tensor | None, n_heads: int) -> torch.Tensor | None:
    return None if bias is None else bias.reshape(n_heads, -1)


def split_output_heads(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(d, H·d_h) output projection → (H, d, d_h): column block h multiplies head h."""
    d, hd = weight.shape
    return weight.reshape(d, n_heads, hd // n_heads).permute(1, 0, 2)


class Adapter(abc.ABC):
    """Architecture knowledge for one ``config.model_type``.

    A *slot* is one attention module that owns weights; the *layer sequence* lists, in execution
    order, which slot each layer runs (identity except for weight-sharing models like ALBERT).
    """

    model_type: ClassVar[str]
    #: attribute name of the base model inside head classes (``GPT2LMHeadModel.transformer``)
    base_model_prefix: ClassVar[str]

    # ---- declared facts (docs/math.md §1b): shared code reads these, never ``model_type`` ----------
    #: how positions enter: "learned" (absolute, added to the embeddings), "rotary", "alibi"
    position_kind: ClassVar[str] = "learned"
    #: "layernorm", "rmsnorm" (x/√(mean x²+ε)·w) or "rmsnorm+1" (Gemma: ·(1+w))
    norm_kind: ClassVar[str] = "layernorm"
    #: "pre" (x + attn(ln x), then the FFN), "post" (LN(x + attn(x))), "parallel"
    #: (x + attn(ln₁x) + mlp(ln₂x)), "sandwich" (pre with norms after attention and FFN too),
    #: "norm-after" (x + ln(attn(x)), OLMo-2)
    residual: ClassVar[str] = "pre"
    #: how Q/K/V are stored: "separate", "fused" ([Q|K|V] rows), "interleaved" (per head [q k v])
    qkv_layout: ClassVar[str] = "separate"
    #: whether weight-shared layers can be given their own copy before an edit (ALBERT)
    can_untie: ClassVar[bool] = False

    def __init__(self, config) -> None:
        self.config = config

    @property
    def n_kv_heads(self) -> int:
        """Key/value heads H_kv (grouped-query attention; H_kv = H otherwise)."""
        return self.n_heads

    @property
    def norm_eps(self) -> float:
        """ε of the model's norms."""
        c = self.config
        return float(getattr(c, "layer_norm_epsilon", getattr(c, "layer_norm_eps", 1e-5)))

    def pre_attention_norm_module(self, layer: int, get: TensorGetter) -> torch.nn.Module | None:
        """The model's pre-attention norm of execution layer ``layer`` as a module loaded from the
        stored weights (None for post-LN models). Default: ``nn.LayerNorm`` with :attr:`norm_eps`."""
        name = self.pre_attention_norm(layer)
        if name is None:
            return None
        w = get(f"{name}.weight")
        ln = torch.nn.LayerNorm(w.shape[0], eps=self.norm_eps, dtype=w.dtype)
        with torch.no_grad():
            ln.weight.copy_(w)
            ln.bias.copy_(get(f"{name}.bias"))
        return ln

    @property
    def final_norm_in_hidden_states(self) -> bool:
        """Whether ``output_hidden_states``' last entry is taken after the final norm."""
        return self.residual != "post"

    @property
    def hidden_states_per_layer(self) -> bool:
        """Whether ``output_hidden_states`` gives one state per execution layer."""
        return True

    def block_inputs(self, base: torch.nn.Module, n: int, dtype: torch.dtype,
                     device: torch.device | str | None = None) -> list:
        """What :meth:`run_block` needs besides the hidden states, one entry per execution layer,
        for prompts of ``n`` tokens. Default: the additive mask of :meth:`block_attention_mask`
        (blocks with the same mask share one tensor)."""
        first = {self.mask(k): k for k in reversed(range(self.n_layers))}  # the first layer of each mask
        by_spec = {spec: self.block_attention_mask(k, n, dtype, device) for spec, k in first.items()}
        return [by_spec[self.mask(k)] for k in range(self.n_layers)]

    # ---- shape facts -------------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def d_model(self) -> int: ...

    @property
    @abc.abstractmethod
    def n_heads(self) -> int: ...

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @abc.abstractmethod
    def slots(self) -> list[str]:
        """Module path (relative to the base model) of every weight-owning attention module."""

    def layer_sequence(self) -> list[int]:
        """Slot index run by each layer, in execution order. Default: no sharing."""
        return list(range(len(self.slots())))

    @property
    def n_layers(self) -> int:
        return len(self.layer_sequence())

    @property
    def shares_weights(self) -> bool:
        return len(set(self.layer_sequence())) < self.n_layers

    @abc.abstractmethod
    def mask(self, layer: int) -> MaskSpec:
        """Mask of execution layer ``layer``."""

    @abc.abstractmethod
    def scale(self, layer: int) -> float:
        """Multiplier of the attention scores q·k of execution layer ``layer``."""

    # ---- weights -----------------------------------------------------------------------------
    @abc.abstractmethod
    def read_attention(self, layer: int, get: TensorGetter, parts: Sequence[Part] = ("qk", "vo")) -> AttentionWeights:
        """Canonical weights of execution layer ``layer``, reading only the tensors ``parts`` need."""

    @abc.abstractmethod
    def output_weight_name(self, slot: int) -> str:
        """Key (relative to the base model) of the stored output-projection weight of ``slot``."""

    def output_weight_to_stored(self, W_O: torch.Tensor) -> torch.Tensor:
        """Canonical concatenated W_O (d, d) → the tensor as stored in the module/checkpoint. Default:
        ``nn.Linear``, which stores (out, in), already the canonical layout (GPT-2's Conv1D overrides)."""
        return W_O

    def output_weight_from_stored(self, stored: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`output_weight_to_stored`."""
        return stored

    def pre_attention_norm(self, layer: int) -> str | None:
        """Module path of the LayerNorm applied right before attention (pre-LN models), else None."""
        return None

    def attention_module_output(self, slot: int) -> str:
        """Module whose forward output is the attention sublayer's output before the residual
        (used by tests and verification hooks)."""
        raise NotImplementedError

    # ---- residual-stream writers (docs/math.md §5e) -------------------------------------------------
    #: declared: the writers of one block, paths relative to ``layer_block(slot)``
    block_writer_specs: ClassVar[tuple[Writer, ...]] = ()
    #: declared: the embedding writers, paths relative to the base model
    embedding_writer_specs: ClassVar[tuple[Writer, ...]] = ()

    def block_writers(self, slot: int) -> list[Writer]:
        """The writers of weight slot ``slot`` (attention output first, then the MLP's output),
        paths relative to the base model."""
        return [w.at(self.layer_block(slot), slot) for w in self.block_writer_specs]

    def embedding_writers(self) -> list[Writer]:
        """What writes the first block's input: token (and learned position / token type) embeddings."""
        return list(self.embedding_writer_specs)

    def writers(self, kinds: Sequence[str] = WRITER_KINDS) -> list[Writer]:
        """Every declared writer whose kind is in ``kinds``: the embeddings, then each slot's."""
        out = [w for w in self.embedding_writers() if w.kind in kinds]
        for slot in range(len(self.slots())):
            out += [w for w in self.block_writers(slot) if w.kind in kinds]
        return out

    def last_writer(self, layer: int, model_id: str) -> Writer:
        """The writer whose output is the last write into the residual stream after execution layer
        ``layer``: the MLP's output projection of a pre-norm block, with no norm of its own after it
        (where a constant added after the block can be written into weights; docs/math.md §5d). A
        model without one is refused in one line saying why."""
        mlp = [w for w in self.block_writers(self.layer_sequence()[layer]) if w.kind == "mlp"]
        why = None
        if self.residual == "post":
            why = "its blocks normalize after the residual addition (post-LN)"
        elif self.shares_weights:
            why = "it runs one block at several layers (shared weights)"
        elif not mlp:
            why = "it declares no MLP output writer"
        elif mlp[0].norm is not None:
            why = f"its MLP output goes through a norm ({mlp[0].norm}) before the residual"
        elif mlp[0].layout not in ("out_in", "in_out"):
            why = f"its MLP output is a {mlp[0].layout} weight"
        if why is not None:
            raise InvalidArgumentError(f"{model_id}: an addition after layer {layer} has no weight-space equal "
                                       f"because {why}. Use activation_steering (a run-time hook) instead.")
        return mlp[0]

    # ---- running the model block by block (looped-model collapse, docs/math.md §6) -----------------
    # ``base`` below is always the base model (``model.base_model``: GPT2Model, BertModel...).

    @property
    def max_positions(self) -> int | None:
        """How many positions the position embedding holds (None: no limit known)."""
        return config_positions(self.config)

    @property
    def vocab_size(self) -> int:
        return int(self.config.vocab_size)

    def embed(self, base: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
        """The hidden states the first block receives: everything the model does to the ids before
        its first block (token + position embeddings, embedding LayerNorm/projection...)."""
        raise NotImplementedError(f"{type(self).__name__} cannot run blocks one by one (no embed())")

    def blocks(self, base: torch.nn.Module) -> list[torch.nn.Module]:
        """The transformer blocks in execution order, one per entry of :meth:`layer_sequence`
        (a shared block appears once per use)."""
        raise NotImplementedError(f"{type(self).__name__} cannot run blocks one by one (no blocks())")

    def final_norm(self, base: torch.nn.Module) -> torch.nn.Module | None:
        """The norm applied after the last block (pre-LN models' ``ln_f``); None for post-LN encoders."""
        return None

    def block_attention_mask(self, layer: int, n: int, dtype: torch.dtype,
                             device: torch.device | str | None = None) -> torch.Tensor | None:
        """The additive attention mask (1, 1, n, n) that execution layer ``layer`` must be given
        when called on its own: 0 where :meth:`mask` allows a key, the dtype's lowest value elsewhere;
        None for full attention. transformers 5 builds masks at model level, so a block called
        without this one silently attends to every token."""
        spec = self.mask(layer)
        if spec.kind == "full":
            return None
        out = torch.zeros(n, n, dtype=dtype, device=device)
        return out.masked_fill(~spec.allowed(n, device=device), torch.finfo(dtype).min)[None, None]

    def run_block(self, block: torch.nn.Module, hidden: torch.Tensor, mask: torch.Tensor | None,
                  *, ffn: bool = True) -> torch.Tensor:
        """One block on ``hidden`` (batch, n, d) with ``mask``; ``ffn=False`` drops the
        feed-forward sublayer together with its norm and its residual."""
        raise NotImplementedError(f"{type(self).__name__} cannot run blocks one by one (no run_block())")

    def layer_block(self, slot: int) -> str:
        """Module path of the whole layer (attention + FFN + norms) that runs ``slot``; its
        forward can be re-run on cached inputs (steering measures only the edited layer again).
        Default: the attention module's parent."""
        return self.slots()[slot].rsplit(".", 1)[0]

    def config_summary(self) -> dict:
        return {
            "model_type": self.model_type, "d_model": self.d_model, "n_heads": self.n_heads,
            "n_kv_heads": self.n_kv_heads, "head_dim": self.head_dim, "positions": self.position_kind,
            "norm": self.norm_kind, "residual": self.residual, "qkv_layout": self.qkv_layout,
            "n_layers": self.n_layers, "n_distinct_layers": len(self.slots()), "shares_weights": self.shares_weights,
        }
