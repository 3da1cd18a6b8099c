"""Steer MiniLM's sentence embeddings toward a topic sentence, seen through sentence-transformers.

The direction is the mean final hidden state of the topic sentence (``text=``); the last layer's
attention output weight is edited in place inside the SentenceTransformer's own BertModel, and
the cosine between each sentence's embedding and the topic's (embedded by the *original* model)
rises. Runs offline on the bundled MiniLM in a few seconds:  python examples/steer_minilm_embeddings.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import numpy as np  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402

from steerformer.loading import bundled_minilm_path  # noqa: E402
from steerformer.steering import steer, unsteer  # noqa: E402

TOPIC = "The orchestra played a beautiful symphony in the concert hall."
SENTENCES = [
    "The stock market fell sharply on Monday.",
    "My cat sleeps on the sofa all afternoon.",
    "The new phone has a larger battery.",
    "Heavy snow closed the mountain roads.",
]


def main() -> dict:
    st = SentenceTransformer(str(bundled_minilm_path()), device="cpu")
    topic = st.encode([TOPIC], normalize_embeddings=True)[0]
    before = st.encode(SENTENCES, normalize_embeddings=True) @ topic
    bert = st[0].auto_model  # the transformers BertModel inside the pipeline, edited in place
    # Left vector w: the component every token shares (mean state of neutral text), so the push
    # γ u (wᵀx) has the same sign for every token — toward +u, not away from it. With the
    # default w = u the edit amplifies each token's own sign along u.
    neutral = st.encode(["This is a sentence.", "Here is some text."], output_value="token_embeddings")
    left = np.concatenate([t.numpy() for t in neutral]).mean(0)
    record = steer(bert, text=TOPIC, left=left, tokenizer=st.tokenizer, target_alignment=0.6, report=False)
    after = st.encode(SENTENCES, normalize_embeddings=True) @ topic
    unsteer(bert)
    restored = st.encode(SENTENCES, normalize_embeddings=True) @ topic
    print(f"steered layer {record.layer}, gain {record.gain:.4g} (strength {record.details.strength:.3g}); {record.message}")
    print(f"{'cos(sentence, topic)':60s} before  after")
    for s, b, a in zip(SENTENCES, before, after):
        print(f"{s:60s} {b:6.3f} {a:6.3f}")
    print(f"mean cosine {before.mean():.3f} -> {after.mean():.3f}; after unsteer {restored.mean():.3f}")
    return {"before": before, "after": after, "restored": restored}


if __name__ == "__main__":
    res = main()
    sys.exit(0 if res["after"].mean() > res["before"].mean() + 0.2 and np.allclose(res["restored"], res["before"], atol=1e-6) else 1)
