"""What a caller hands the probe room (``capture``, ``BlockCache``, ``AnswerBatch``, ``KLProbe``) is
checked before any hook is placed or any forward runs: each bad value is one ``InvalidArgumentError``
naming the argument and what is valid, and the model carries exactly the hooks it had before."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from steerformer.errors import InvalidArgumentError
from steerformer.loading import open_source
from steerformer.prompts import PromptBatch
from steerformer.steering.probe import AnswerBatch, BlockCache, KLProbe, capture

from ..models import VOCAB, make_model

POSITIONS = 64  # tests/models.py: n_positions / max_position_embeddings


@pytest.fixture(scope="module")
def llama():
    model = make_model("llama", dtype=torch.float64, head=True).eval()
    return model, open_source(model).adapter


@pytest.fixture(scope="module")
def gpt2():
    model = make_model("gpt2", dtype=torch.float64, head=True).eval()
    return model, open_source(model).adapter


def hooks(model) -> int:
    return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules())


def batch() -> PromptBatch:
    return PromptBatch.from_rows([[5, 9, 13], [7, 3]], pad_id=0)


def refused(call, argument: str, *words: str) -> str:
    with pytest.raises(InvalidArgumentError) as info:
        call()
    msg = str(info.value)
    assert info.value.argument == argument and msg.startswith(f"{argument}="), msg
    assert "\n" not in msg and all(w in msg for w in words), msg
    return msg


@pytest.mark.parametrize("kwargs, argument", [
    ({"outputs": [True]}, "outputs"),  # True was layer 1
    ({"inputs": [False, 1]}, "inputs"),  # False was layer 0
    ({"modules": {True: ["layers.1.mlp.down_proj"]}}, "modules"),
    ({"outputs": [-1]}, "outputs"),
    ({"outputs": [10 ** 12]}, "outputs"),
    ({"outputs": [1.0]}, "outputs"),
    ({"outputs": ["1"]}, "outputs"),
    ({"outputs": 1}, "outputs"),  # a number, not a list of layers
], ids=["bool-output", "bool-input", "bool-module-layer", "negative", "huge", "float", "string", "bare-int"])
def test_a_layer_that_is_no_layer_of_the_model_is_refused_before_any_hook(llama, kwargs, argument) -> None:
    model, adapter = llama
    before = hooks(model)
    refused(lambda: capture(model, adapter, batch(), **kwargs), argument, "execution layers")
    assert hooks(model) == before


def test_numpy_and_torch_integers_are_layers(llama) -> None:
    model, adapter = llama
    got = capture(model, adapter, batch(), outputs=[np.int64(1), torch.tensor(0)])
    assert set(got.outputs) == {0, 1}


@pytest.mark.parametrize("modules", [{0: ["layers.0.no_such_module"]}, {0: ["mlp"]}, {0: "layers.0.mlp"},
                                     {0: [""]}, ["layers.0.mlp"]],
                         ids=["missing-path", "path-outside-the-base-model", "bare-string", "empty-path", "not-a-mapping"])
def test_a_module_path_the_model_does_not_have_is_one_line_and_leaves_no_hook(llama, modules) -> None:
    model, adapter = llama
    before = hooks(model)
    refused(lambda: capture(model, adapter, batch(), modules=modules), "modules")
    assert hooks(model) == before


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("rows, words", [
    ([[1, 2, VOCAB]], ("token ids in [0, ",)),  # one past the vocabulary: IndexError in the embedding
    ([[1, -3, 2]], ("token ids in [0, ",)),
    ([list(range(1, 20)) * 4], ("positions", "76")),  # 76 tokens > 64 positions
], ids=["id-past-the-vocabulary", "negative-id", "longer-than-the-positions"])
def test_token_rows_the_model_cannot_read_are_refused_before_the_forward(request, family, rows, words) -> None:
    model, adapter = request.getfixturevalue(family)
    before = hooks(model)
    refused(lambda: capture(model, adapter, PromptBatch.from_rows(rows), outputs=[0]), "batch", *words)
    assert hooks(model) == before


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_answers_longer_than_the_models_positions_are_one_line(request, family) -> None:
    model, adapter = request.getfixturevalue(family)
    rows = AnswerBatch.of([[1, 2, 3]], [list(range(4, 30)) * 3])  # 3 + 78 tokens
    before = hooks(model)
    refused(lambda: rows.logprobs(model), "answers", f"the model's {POSITIONS} positions", "81")
    refused(lambda: KLProbe.of(model, adapter, rows, cached=True), "answers", "positions")
    assert hooks(model) == before


@pytest.mark.parametrize("prompts, answers, argument, words", [
    ([[1, 2], [3, 4]], [[5]], "answers", ("one answer per prompt", "2 prompts")),  # zip dropped the second row
    ([], [], "prompts", ("at least one prompt",)),
    ([[1, 2], []], [[5], [6]], "prompts", ("prompt 1 of no token",)),
    ([[1, 2.7]], [[5]], "prompts", ("whole numbers",)),  # torch's long tensor truncated it to 2
    ([[1, True]], [[5]], "prompts", ("whole numbers",)),  # read as token 1
    ([[1, 2]], [[-5]], "answers", ("whole numbers >= 0",)),
    (["hello"], [[5]], "prompts", ("token id lists", "Tokenize")),
    ([[1, 2]], [[5]], "pad", ("token id",)),
], ids=["fewer-answers-than-prompts", "empty-batch", "empty-prompt", "float-id", "bool-id", "negative-id",
        "text-not-ids", "negative-pad"])
def test_an_answer_batch_that_cannot_be_built_is_one_line(prompts, answers, argument, words) -> None:
    pad = -1 if argument == "pad" else 0
    refused(lambda: AnswerBatch.of(prompts, answers, pad=pad), argument, *words)


def test_an_empty_answer_selects_nothing_and_the_others_still_count(llama) -> None:
    model, adapter = llama
    rows = AnswerBatch.of([[1, 2, 3], [4, 5]], [[], [8, 9, 10]])
    assert rows.select.sum() == 3 and rows.lengths == [0, 3]
    assert [t.shape[0] for t in rows.per_answer(rows.logprobs(model))] == [0, 3]
    assert KLProbe.of(model, adapter, rows).kl_of(model) == 0.0


def test_a_kl_over_no_answer_token_is_refused_not_nan(llama) -> None:
    model, adapter = llama
    rows = AnswerBatch.of([[1, 2, 3], [4, 5]], [[], []])
    refused(lambda: KLProbe.of(model, adapter, rows), "answers", "at least one answer token")


def test_probe_layers_outside_the_cache_are_refused_never_read_from_another_layer(llama) -> None:
    model, adapter = llama
    rows = AnswerBatch.of([[1, 2, 3]], [[6, 7]])
    before = hooks(model)
    refused(lambda: BlockCache.of(model, adapter, rows.batch, start=True), "start", "not bools")  # was range(1, n)
    refused(lambda: BlockCache.of(model, adapter, rows.batch, start=2), "start", "[0, 1]")  # was an empty cache
    refused(lambda: BlockCache.of(model, adapter, rows.batch, start=-1), "start")  # was named "layers"
    cache = BlockCache.of(model, adapter, rows.batch, start=1)
    refused(lambda: cache.states(start=0), "start", "starts at layer 1")  # was the blocks of calls[-1:]: wrong states
    refused(lambda: cache.block_output(0), "layer")  # was calls[0], layer 1's input
    refused(lambda: cache.module_input(1, "layers.1.nope"), "path")
    refused(lambda: cache.module_input(5, "layers.1.mlp"), "layer")
    assert hooks(model) == before


def test_a_kl_of_log_probabilities_of_another_shape_is_refused_not_broadcast(llama) -> None:
    model, adapter = llama
    rows = AnswerBatch.of([[1, 2, 3], [4, 5]], [[6, 7], [8, 9, 10]])
    probe = KLProbe.of(model, adapter, rows)
    one_row = probe.base_logprobs[:1]  # (1, vocab) broadcast over the 5 positions: a number, and a wrong one
    refused(lambda: probe.kl(one_row), "logprobs", "(5, ")
    refused(lambda: probe.rerun(0), "start", "cached=True")  # was AttributeError: 'NoneType' ... 'logprobs'
    cached = KLProbe.of(model, adapter, rows, cached=True)
    assert cached.kl(cached.rerun(1)) == pytest.approx(0.0, abs=1e-12)
