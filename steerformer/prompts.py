"""The built-in prompt sets, all of them, and one batch of prompts as model inputs — shared by
steering, the full-model statistics and collapse. Import-light: torch is imported when a batch is
built, so the prompt sets can be read without it.

:meth:`PromptBatch.from_texts` tokenizes without touching the tokenizer: a tokenizer without a pad
token (GPT-2) is padded with its end-of-text id here, instead of setting ``tokenizer.pad_token`` on
the caller's object. Padded positions are masked out, so the pad id never matters.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Sequence

from .errors import bad_argument

if TYPE_CHECKING:
    import torch


# ---- the full-model statistics (stats/full_model.py) ----------------------------------------------
#: Built-in prompts: plain English sentences of varied length and topic.
DEFAULT_PROMPTS = (
    "The quick brown fox jumps over the lazy dog.",
    "Transformers process every token of a sentence in parallel through a stack of layers.",
    "In the morning the fishermen pulled their boats onto the cold grey beach.",
    "She opened the old book and found a letter that nobody had read for fifty years.",
    "Water boils at one hundred degrees Celsius at sea level.",
    "The committee will announce its decision after the meeting next Tuesday.",
    "A small cat slept on the warm windowsill while the rain kept falling outside.",
    "Prices of fresh vegetables rose sharply during the long dry summer.",
    "He practiced the violin for hours every day until his fingers hurt.",
    "The power method finds the dominant eigenvector of a matrix by repeated multiplication.",
    "Our train was delayed because of snow on the tracks near the mountain pass.",
    "Children in the village learn to swim in the river before they learn to read.",
    "The museum reopened with a new exhibition of ancient coins and pottery.",
    "If you mix blue and yellow paint, you get green.",
    "The spacecraft sent back pictures of a frozen moon covered in cracks.",
    "Good bread needs flour, water, salt, yeast and a lot of patience.",
)


# ---- steering's probes and held-out measurement (steering/measure.py) -----------------------------
REFERENCE_SENTENCES = (
    "The cat sat quietly on the warm windowsill.",
    "Interest rates rose again after the central bank meeting.",
    "She played the violin at the concert last night.",
    "The new vaccine was tested on thousands of volunteers.",
    "Our team won the football match in the final minute.",
    "He cooked pasta with tomatoes, garlic and fresh basil.",
    "The spacecraft entered orbit around the red planet.",
    "Heavy rain flooded several streets in the old town.",
    "The novel tells the story of a family across three generations.",
    "Engineers repaired the bridge before the winter storms.",
    "The museum opened a new exhibition of modern sculpture.",
    "Students prepared for their mathematics exam all week.",
    "The old lighthouse still guides ships along the rocky coast.",
    "Prices at the grocery store went up by ten percent this year.",
    "A young chess player defeated the world champion in Oslo.",
    "The hospital hired twenty new nurses for the night shift.",
    "Volcanic ash closed the airport for three days.",
    "My grandmother grows roses and tomatoes in her garden.",
    "The orchestra rehearsed the symphony before the premiere.",
    "Scientists discovered a new species of frog in the rainforest.",
    "The city council voted to build a new public library.",
    "He forgot his umbrella and walked home in the rain.",
    "The startup released an app that translates sign language.",
    "Wolves returned to the valley after a century of absence.",
)

HELDOUT_SENTENCES = (
    "A small boat drifted slowly across the calm lake.",
    "The company announced record profits for the quarter.",
    "Children built a snowman in the park this morning.",
    "The doctor recommended more sleep and less coffee.",
    "A famous painter donated his works to the city.",
    "The train to the coast was delayed by an hour.",
    "Farmers expect a good harvest after the sunny summer.",
    "The software update fixed several security problems.",
)


# ---- chat evaluation and calibration (steering/evaluation/evaluate.py, steering/methods/addition/calibrate.py) ----------------
#: held-out chat questions of the evaluation (never used to fit a direction, a left vector or a gain)
HELDOUT_QUESTIONS = (
    "How can I stay focused while studying?",
    "What are some tips for saving money each month?",
    "How do I write a good cover letter?",
    "What is a good way to start learning a new language?",
    "How can I improve my sleep?",
    "What should I consider when buying a used car?",
    "How do I organize my closet?",
    "What are some good habits for a productive morning?",
    "How can I be a better listener?",
    "What is the best way to prepare for a job interview?",
    "How do I keep my houseplants healthy?",
    "What are some ideas for a birthday gift for a friend?",
    "How can I make my emails more polite?",
    "What should I pack for a weekend trip?",
    "How do I deal with stress at work?",
    "How do I choose a good laptop?",
)

#: calibration prompts: the KL budget search and the fit of a left vector use these only
PROBE_QUESTIONS = (
    "What is a simple recipe for dinner tonight?",
    "How do I clean a laptop keyboard?",
    "Can you explain how a credit score works?",
    "What are good ways to make new friends as an adult?",
    "How should I start running as a beginner?",
    "What is the difference between a loan and a lease?",
    "How can I reduce my screen time?",
    "How do I plan a small vegetable garden?",
)

#: the split, in one place (AxBench): every automatic choice of a steering call (the KL probe, the
#: layer scan, the gain) sees the selection questions only; evaluations report on the report
#: questions (tests/steering/test_selection_split.py checks they never meet)
SELECTION_QUESTIONS = PROBE_QUESTIONS
REPORT_QUESTIONS = HELDOUT_QUESTIONS
SPLITS = {"selection": SELECTION_QUESTIONS, "report": REPORT_QUESTIONS}


# ---- the templated contrast of a concept (steering/methods/addition/calibrate.py) ----------------------------------
#: carriers of the templated contrast: each ends right before the concept (or another noun). 24 of
#: them and 48 contrast nouns: on the rated development set (benchmarks/ratings/, the choosing half)
#: the direction read over these steered better than over the first 8 and 16 at the same KL
#: (docs/steering-chat.md, "The default, chosen on rated answers")
CARRIERS = (
    "I have always been fascinated by",
    "Today we are going to talk about",
    "My favourite thing in the world is",
    "She wrote a long essay about",
    "All I could think about was",
    "The documentary was entirely about",
    "He spent the whole evening reading about",
    "There is nothing more beautiful than",
    "We spent the afternoon learning about",
    "The next chapter of the book is about",
    "Her favourite topic of conversation is",
    "Nobody in the room wanted to discuss",
    "The museum has a whole floor dedicated to",
    "I asked my grandfather to tell me about",
    "The podcast episode this week is about",
    "They made a short film about",
    "The teacher gave a lesson on",
    "Everyone at the party was talking about",
    "I read an interesting article about",
    "The children drew pictures of",
    "He has strong opinions about",
    "The exhibition was all about",
    "We had a long debate about",
    "She asked a question about",
)
OTHER_NOUNS = ("city", "table", "paper", "window", "car", "book", "family", "history", "work", "school", "food",
               "money", "computer", "weather", "health", "law", "garden", "kitchen", "tree", "phone", "shoe", "shirt",
               "door", "bottle", "chair", "lamp", "road", "bridge", "village", "market", "office", "letter", "movie",
               "plan", "language", "science", "art", "friend", "child", "teacher", "number", "stone", "glass",
               "furniture", "color", "island", "pencil", "idea")


def check_fits(n_tokens: int, max_positions: int | None, *, name: str, value: Any, what: str = "text",
               fix: str = "Shorten it: the model cannot read past its positions.") -> None:
    """The one check of text against the positions a model embeds, made before the model runs it:
    ``n_tokens`` (the longest row) past ``max_positions`` (None: no limit known) would index its
    learned position table out of range — an IndexError deep in the forward — or run a rotary model
    on positions it never saw. One line naming ``name`` (the argument the text came from) and
    ``value`` (how to show it, e.g. "10000 words")."""
    if max_positions is not None and n_tokens > max_positions:
        raise bad_argument(name, value, f"{what} that fits the model's {max_positions} positions (it tokenizes to "
                           f"{n_tokens})", fix)


def words_of(texts: str | Sequence[str]) -> str:
    """How a long text is shown in a message: its word count (the longest of several)."""
    texts = [texts] if isinstance(texts, str) else list(texts)
    return f"{max((len(str(t).split()) for t in texts), default=0)} words"


@dataclasses.dataclass
class PromptBatch:
    """Model inputs for a set of prompts and which positions are real tokens."""

    input_ids: torch.Tensor  # (P, n)
    attention_mask: torch.Tensor  # (P, n) 1 = real token
    texts: list[str] | None = None

    def inputs(self) -> dict[str, torch.Tensor]:
        """The keyword arguments of the model's forward."""
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask}

    def to(self, device: torch.device | str | None) -> "PromptBatch":
        """The batch on ``device`` (None: as it is)."""
        return self if device is None else \
            PromptBatch(self.input_ids.to(device), self.attention_mask.to(device), self.texts)

    def rows(self) -> list[list[int]]:
        """The real (unpadded) token ids of each prompt."""
        return [ids[mask.bool()].tolist() for ids, mask in zip(self.input_ids.cpu(), self.attention_mask.cpu())]

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[int]], *, pad_id: int = 0, left: bool = False,
                  texts: list[str] | None = None) -> "PromptBatch":
        """Token id lists of any lengths, padded with ``pad_id`` (on the right unless ``left``)."""
        n = max(len(r) for r in rows)
        import torch

        ids = torch.full((len(rows), n), int(pad_id), dtype=torch.long)
        mask = torch.zeros((len(rows), n), dtype=torch.long)
        for i, r in enumerate(rows):
            sl = slice(n - len(r), n) if left else slice(0, len(r))
            ids[i, sl] = torch.as_tensor(list(r), dtype=torch.long)
            mask[i, sl] = 1
        return cls(ids, mask, texts)

    @classmethod
    def from_texts(cls, texts: Sequence[str], tokenizer: Any) -> "PromptBatch":
        """``texts`` through ``tokenizer`` (special tokens added as the tokenizer does), padded on
        the tokenizer's ``padding_side`` with its pad id, else its end-of-text id, else 0. The
        tokenizer object is left unchanged."""
        texts = [str(t) for t in texts]
        rows = [list(r) for r in tokenizer(texts)["input_ids"]]
        ids = (getattr(tokenizer, name, None) for name in ("pad_token_id", "eos_token_id"))  # eos read only if no pad
        pad = next((i for i in ids if i is not None), 0)
        left = getattr(tokenizer, "padding_side", "right") == "left"
        return cls.from_rows(rows, pad_id=pad, left=left, texts=texts)
