"""The steering modes side by side on the bundled MiniLM: toward / away / ablate / contrastive,
each with the ``exact`` and the ``min-norm`` solve (ablation has no solve: W_O' = (I − uuᵀ)W_O).

Directions: a random unit u (seed 0), and the contrastive direction of 16 music vs 16 everyday
sentences (mean difference of the last layer's mean-pooled states, docs/math.md §5b). Steering edits the
last layer at nominal strength ±10 (γ = ±10·|λ1|) with the left vector w = the unit mean of the
states *entering* the last layer on steerformer's reference sentences (the component every token
shares, so F' = F + γ u wᵀ pushes every token to +u, and "away" to −u); ablation edits all six
layers with s = 1.

Columns, all on steerformer's 8 held-out sentences: mean signed cos(h, u) of the final states
(plain forward passes here) before → after; mean |cos(h, u)| (the record's real-model alignment);
the effective strength γ|w_effᵀu|/|λ1| (docs/math.md §5b); ‖ΔW_O‖/‖W_O‖ (over all edited weights); the
KL of the embedding-readout distributions; and the size of the edit exported as a PEFT LoRA adapter
(``save_steered(model, dir, format="peft")``; the full checkpoint is 91 MB), and the ratio of the
mean |cos(h, u)| after ÷ before (the unsteered model: the baseline, same run).
Run: python benchmarks/steer_modes.py [--smoke]  (a few minutes on 2 busy cores; --smoke: the first
mode with one solve and 4 sentences per side)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from steerformer.loading import bundled_minilm_path, load_model  # noqa: E402
from steerformer.steering import contrastive_direction, save_steered, steer, unsteer  # noqa: E402
from steerformer.steering.measure import HELDOUT_SENTENCES, REFERENCE_SENTENCES  # noqa: E402

MUSIC = [
    "The orchestra rehearsed the symphony all afternoon.", "She practiced the violin before the concert.",
    "The choir sang a hymn in the old cathedral.", "The pianist played a sonata by Beethoven.",
    "The band released a new album of jazz songs.", "He tuned his guitar before going on stage.",
    "The conductor raised his baton and the music began.", "The opera singer hit the high note perfectly.",
    "The drummer kept a steady rhythm through the song.", "Students learned to read musical notes in class.",
    "The string quartet performed Mozart at the festival.", "A saxophone solo closed the jazz concert.",
    "The composer wrote a new piece for piano and cello.", "Fans sang along to every song at the rock concert.",
    "The flute melody floated over the quiet audience.", "The music school offers lessons in trumpet and harp.",
]
EVERYDAY = [
    "The train left the station at noon.", "He bought bread and milk at the store.",
    "The meeting was moved to Thursday morning.", "Rain is expected for most of the weekend.",
    "The city repaired the potholes on Main Street.", "She planted tomatoes in the back garden.",
    "The printer on the third floor is broken.", "Our flight was delayed by two hours.",
    "The children walked to school together.", "He painted the kitchen walls light blue.",
    "The bank raised its interest rates again.", "A new bakery opened near the post office.",
    "The dog chased a ball across the park.", "They moved into a bigger apartment last year.",
    "The doctor asked him to rest for a week.", "The bridge was closed for repairs.",
]


def final_states(model, tok, texts, index: int = -1):
    """States of the real tokens: hidden_states[index] (-1: final, -2: entering the last layer)."""
    enc = tok(list(texts), return_tensors="pt", padding=True)
    with torch.no_grad():
        h = model(**enc, output_hidden_states=True).hidden_states[index].to(torch.float64)
    return h[enc["attention_mask"].bool()]


def signed_cos(model, tok, u: torch.Tensor) -> float:
    h = final_states(model, tok, HELDOUT_SENTENCES)
    return float((h @ u / (h.norm(dim=-1) * u.norm())).mean())


def adapter_bytes(model) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        folder = save_steered(model, Path(tmp) / "a", format="peft")
        return (folder / "adapter_model.safetensors").stat().st_size


def main() -> None:
    import argparse

    from transformers import AutoTokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="one mode, one solve: what the test suite runs")
    smoke = ap.parse_args().smoke

    tok = AutoTokenizer.from_pretrained(str(bundled_minilm_path()))
    model = load_model("minilm")
    u_rand = torch.randn(model.config.hidden_size, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    u_rand /= u_rand.norm()
    u_music = contrastive_direction(model, MUSIC[:4] if smoke else MUSIC, EVERYDAY[:4] if smoke else EVERYDAY, tokenizer=tok)
    left = final_states(model, tok, REFERENCE_SENTENCES, index=-2).mean(0)  # what the last layer reads
    rows = []
    modes = (
        ("toward", u_rand, {"strength": 10.0}),
        ("toward, bias shift compensated", u_rand, {"strength": 10.0, "compensate_bias": True}),
        ("away", u_rand, {"strength": -10.0}),
        ("ablate (all layers)", u_rand, {"method": "ablation"}),
        ("contrastive (toward)", u_music, {"strength": 10.0}),
        ("ablate contrastive (all layers)", u_music, {"method": "ablation"}),
    )
    for mode, u, kw in modes[:1] if smoke else modes:
        for solve in ((None,) if kw.get("method") == "ablation" else ("exact",) if smoke else ("exact", "min-norm")):
            vec = u.vector if hasattr(u, "vector") else u
            before = signed_cos(model, tok, vec)
            extra = {} if solve is None else {"solve": solve, "left": left}
            r = steer(model, u, **kw, **extra)
            after = signed_cos(model, tok, vec)
            size = None if kw.get("compensate_bias") else adapter_bytes(model)  # b_O changes: no LoRA
            unsteer(model)
            shift = None if r.details is None or r.details.bias_shift_norm is None else r.details.bias_shift_norm
            rows.append((mode, solve or "—", kw.get("strength", "—"), before, after, r.alignment_model_before,
                         r.alignment_model_after, None if r.details is None else r.details.effective_strength, r.weight_change, shift, r.kl, size,
                         len(r.edits)))
    print("| mode | solve | nominal s | mean cos(h, u) | mean abs cos(h, u) | effective s | ‖ΔW_O‖/‖W_O‖ | "
          "bias shift ‖γ(a·b_V)u‖ | KL | LoRA adapter | ratio abs cos after/before |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    fmt = lambda x, spec: "—" if x is None else format(x, spec)  # noqa: E731
    for mode, solve, s, b, a, ab, aa, eff, dw, shift, kl, size, k in rows:
        lora = "— (changes b_O)" if size is None else f"{size / 1024:.1f} KB ({k} module{'s' if k > 1 else ''})"
        print(f"| {mode} | {solve} | {s} | {b:+.3f} → {a:+.3f} | {ab:.3f} → {aa:.3f} | {fmt(eff, '.3g')} | {dw:.3g} | "
              f"{fmt(shift, '.3g')} | {kl:.3g} | {lora} | {aa / ab:.2f} |")


if __name__ == "__main__":
    main()
