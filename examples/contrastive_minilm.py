"""A contrastive direction on MiniLM: "music" sentences minus everyday ones, then steer toward it.

``contrastive_direction`` takes the mean hidden state after the last layer of each sentence (MiniLM
is an encoder, so the mean over tokens) and returns the normalized difference of the two groups'
means (docs/math.md §5b). The last layer's attention output weight is then edited in place inside the
SentenceTransformer's BertModel; held-out sentences of both kinds move toward the music centroid.
Runs offline on the bundled MiniLM in a few seconds:  python examples/contrastive_minilm.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import numpy as np  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402

from steerformer.loading import bundled_minilm_path  # noqa: E402
from steerformer.steering import contrastive_direction, steer, unsteer  # noqa: E402

MUSIC = [
    "The orchestra rehearsed the symphony all afternoon.", "She practiced the violin before the concert.",
    "The choir sang a hymn in the old cathedral.", "The pianist played a sonata by Beethoven.",
    "The band released a new album of jazz songs.", "He tuned his guitar before going on stage.",
    "The conductor raised his baton and the music began.", "The opera singer hit the high note perfectly.",
]
EVERYDAY = [
    "The train left the station at noon.", "He bought bread and milk at the store.",
    "The meeting was moved to Thursday morning.", "Rain is expected for most of the weekend.",
    "The city repaired the potholes on Main Street.", "She planted tomatoes in the back garden.",
    "The printer on the third floor is broken.", "Our flight was delayed by two hours.",
]
HELDOUT = [
    "The violinist bowed after the final movement.", "A brass band played marches in the town square.",
    "The store closes at eight on Sundays.", "The farmer sold eggs at the market.",
]


def main() -> dict:
    st = SentenceTransformer(str(bundled_minilm_path()), device="cpu")
    centroid = st.encode(MUSIC, normalize_embeddings=True).mean(0)
    centroid /= np.linalg.norm(centroid)
    before = st.encode(HELDOUT, normalize_embeddings=True) @ centroid
    bert = st[0].auto_model  # the transformers BertModel inside the pipeline, edited in place
    d = contrastive_direction(bert, MUSIC, EVERYDAY, tokenizer=st.tokenizer)
    # Left vector w: the state component every token shares, so the push γ u (wᵀx) is toward +u.
    tokens = st.encode(MUSIC + EVERYDAY, output_value="token_embeddings")
    left = np.concatenate([t.numpy() for t in tokens]).mean(0)
    record = steer(bert, d, left=left, tokenizer=st.tokenizer, target_alignment=0.3, report=False)
    after = st.encode(HELDOUT, normalize_embeddings=True) @ centroid
    unsteer(bert)
    print(f"direction: {d.method} of {d.n_positive} vs {d.n_negative} sentences after layer {d.layer} "
          f"({d.token} over tokens), |difference| = {d.raw_norm:.3f}")
    print(f"steered layer {record.layer}, gain {record.gain:.4g} (strength {record.details.strength:.3g})")
    print(f"{'cos(sentence, music centroid)':52s} before  after")
    for s, b, a in zip(HELDOUT, before, after):
        print(f"{s:52s} {b:6.3f} {a:6.3f}")
    print(f"mean cosine {before.mean():.3f} -> {after.mean():.3f}")
    return {"before": before, "after": after}


if __name__ == "__main__":
    res = main()
    sys.exit(0 if (res["after"] > res["before"]).all() else 1)
