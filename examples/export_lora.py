"""Export a steering edit of MiniLM as a PEFT LoRA adapter and load it back with PEFT.

The rank-1 edit ΔW_O = γ u a of the last layer's attention output is exactly a rank-1 LoRA
(lora_B = γ u, lora_A = a, scaling 1; docs/math.md §5c). ``save_steered(model, dir, format="peft")``
writes it as an adapter folder of a few KB instead of a 91 MB checkpoint; PEFT loads it onto the
unedited model and computes what the steered model computes. Runs offline on the bundled MiniLM:
python examples/export_lora.py
"""

from __future__ import annotations

import copy
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402
from peft import PeftModel  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from steerformer.loading import bundled_minilm_path, load_model  # noqa: E402
from steerformer.steering import save_steered, steer  # noqa: E402

SENTENCES = ["The stock market fell sharply on Monday.", "My cat sleeps on the sofa all afternoon."]


def main() -> dict:
    tok = AutoTokenizer.from_pretrained(str(bundled_minilm_path()))
    model = load_model("minilm")
    base = copy.deepcopy(model)  # the unedited model the adapter will be loaded onto
    record = steer(model, text="The orchestra played a beautiful symphony.", tokenizer=tok, strength=5.0,
                   solve="exact", report=False)
    enc = tok(SENTENCES, return_tensors="pt", padding=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = save_steered(model, Path(tmp) / "adapter", format="peft")
        files = {p.relative_to(folder).as_posix(): p.stat().st_size for p in folder.rglob("*") if p.is_file()}
        print((folder / "adapter_config.json").read_text())
        peft_model = PeftModel.from_pretrained(base, str(folder)).eval()
        with torch.no_grad():
            steered = model(**enc).last_hidden_state
            via_lora = peft_model(**enc).last_hidden_state
        rel = float((via_lora - steered).abs().max() / steered.abs().max())
    checkpoint = sum(p.numel() * p.element_size() for p in model.parameters())
    print(f"edited {record.module} with gain {record.gain:.4g}")
    for name, size in sorted(files.items()):
        print(f"  {name:32s} {size:8d} bytes")
    print(f"adapter weights {files['adapter_model.safetensors'] / 1024:.1f} KB vs model weights "
          f"{checkpoint / 2**20:.1f} MB; max relative difference PEFT vs in-place edit: {rel:.2e}")
    return {"rel": rel, "adapter_bytes": files["adapter_model.safetensors"], "model_bytes": checkpoint}


if __name__ == "__main__":
    res = main()
    sys.exit(0 if res["rel"] <= 1e-5 and res["adapter_bytes"] < res["model_bytes"] / 1000 else 1)
