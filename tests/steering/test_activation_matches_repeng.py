"""A control vector imported from a file and applied by ``sf.activation_steering`` does what
repeng's ``ControlModel`` does with the same vector: the logits agree to 1e-5.

repeng 0.4 (the latest on PyPI) pins numpy < 2 and cannot be installed next to this project, so
the reference is a transcription of its ``ControlModule.forward`` (repeng/control.py): each
controlled decoder layer is wrapped, and its output hidden state gets ``coeff * directions[N]``
added, masked to the positions from the first ``position_ids == 0`` on (left padding excluded)."""

from __future__ import annotations

import numpy as np
import torch

import steerformer as sf
from steerformer.formats.control_vector import ControlVector, read_control_vector

from ..models import make_model


class RepengControlModule(torch.nn.Module):
    """Transcription of repeng's ControlModule: the block's output plus coeff·v (operator +,
    normalize=False), masked by position ids as repeng masks them."""

    def __init__(self, block: torch.nn.Module, control: torch.Tensor) -> None:
        super().__init__()
        self.block, self.control = block, control

    def forward(self, *args, **kwargs):
        output = self.block(*args, **kwargs)
        modified = output[0] if isinstance(output, tuple) else output
        control = self.control.reshape(1, 1, -1).to(modified.device, modified.dtype)
        if kwargs.get("position_ids") is not None:
            # transformers 5 passes one row of position ids for an unpadded batch: broadcast it
            pos = kwargs["position_ids"].expand(modified.shape[0], -1)
            zero_indices = (pos == 0).cumsum(1).argmax(1, keepdim=True)
            col_indices = torch.arange(pos.size(1), device=pos.device).unsqueeze(0)
            mask = (col_indices >= zero_indices).to(modified.dtype).reshape(modified.shape[0], modified.shape[1], 1)
        else:
            mask = 1.0
        modified = modified + control * mask
        return (modified,) + tuple(output[1:]) if isinstance(output, tuple) else modified


def test_an_imported_control_vector_steers_as_repeng_control_model_does(tmp_path) -> None:
    model = make_model("llama", head=True, dtype=torch.float32).eval()
    d, n = model.config.hidden_size, model.config.num_hidden_layers
    rng = np.random.default_rng(0)
    directions = {N: torch.from_numpy(rng.standard_normal(d).astype(np.float32)) for N in (1, n - 1)}
    path = tmp_path / "v.gguf"
    ControlVector(directions, model_hint="llama").save(path)
    imported = read_control_vector(path)
    coeff = 0.7
    ids = torch.randint(0, model.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(1))

    with torch.no_grad():
        base = model(input_ids=ids).logits
        with sf.activation_steering(model, sf.Direction.from_control_vector(imported), coeff=coeff):
            ours = model(input_ids=ids).logits
        blocks = model.model.layers
        originals = {N: blocks[N] for N in directions}
        try:
            for N, v in imported.directions.items():  # repeng: set_control(vector, coeff)
                blocks[N] = RepengControlModule(originals[N], coeff * torch.as_tensor(v))
            theirs = model(input_ids=ids).logits
        finally:
            for N, block in originals.items():
                blocks[N] = block

    assert float((ours - base).abs().max()) > 1e-3  # the vector does something
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
