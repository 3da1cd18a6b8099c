"""Fluency features beyond the offline judge's (issue 34 item 2; docs/steering-chat.md, "The judge"):
can the base model's token surprisals, the answer's NLL *in context*, sentence similarities or
text rules raise the held-out κ of the fluency rating? Every choice is made on the fit half of
``benchmarks/data/judge_labels/`` (leave-one-concept-out inside it); the held-out half is scored
once per LOCO pick.

Run:  python benchmarks/bench_judge_fluency.py --cache runs/judge-fluency   (SmolLM2 + MiniLM once,
      about 6 min on the 2-core machine; the analysis then reads the cache)
      python benchmarks/bench_judge_fluency.py --smoke   (the suite: every feature of 2 answers per
      concept, computed in a fresh folder, and the ratio of in-context to free NLL; no fit)

Features per answer (tokens: the answer re-tokenized; the first 3 tokens skipped for the spikes):
  f_ratio   NLL after an empty user turn ÷ the half's base answers' (the judge's ν today)
  c_ratio   NLL after the question ÷ the half's base answers' NLL after their questions (Baseline.nll)
  c_q90     90th percentile of the token NLLs after the question
  rep2, dbl the judge's repeated word 2-gram share and doubled words
  and, as candidates for a "fluency ≤ 1" rule: max / top-3 / counts of token NLL spikes (free and in
  context), surprisal − entropy, low-entropy spikes (a slip where the model was sure), mid-word
  surprisal (made-up words), near repeats, duplicated sentences, the lowest MiniLM similarity of
  consecutive sentences, word 4-gram repetition, grammar slips.
Rules: (1) the judge's threshold rules with ν replaced or one extra rule added, thresholds by
coordinate ascent on κ; (2) a linear score with two cuts (ordinal logistic regression, L2 λ) after
the hard loop rules (R ≥ 0.3 or D ≥ 2 → 0), on standardized features.
"""

from __future__ import annotations

import argparse
import collections
import pickle
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
OFF = 1e9


def cached(path: Path, make, log):
    if path.exists():
        return pickle.loads(path.read_bytes())
    log(f"computing {path.name} ...")
    value = make()
    tmp = path.with_suffix(".part")
    tmp.write_bytes(pickle.dumps(value))
    tmp.replace(path)
    return value


def judge_features(rows):
    from bench_judge_agreement import items_of
    from steerformer.steering.evaluation.judge import OfflineJudge

    return OfflineJudge().features(items_of(rows))


def model_features(rows, log):
    """Per-token NLL, entropy and rank of each answer under the unsteered SmolLM2, after an empty
    user turn ("free") and after its question ("ctx")."""
    import torch

    from bench_chat_steering import load
    from steerformer.steering.chat import chat_rows
    from steerformer.steering.evaluation.evaluate import answer_logprobs

    torch.set_num_threads(1)
    model, tok = load(None)
    answers = [tok(r["answer"], add_special_tokens=False)["input_ids"] for r in rows]
    out = {"ids": [r["id"] for r in rows], "tokens": [tok.convert_ids_to_tokens(a) for a in answers]}
    for name, prompts in (("free", chat_rows(tok, [""] * len(rows))), ("ctx", chat_rows(tok, [r["question"] for r in rows]))):
        res = []
        for s in range(0, len(rows), 16):
            for lp, a in zip(answer_logprobs(model, prompts[s:s + 16], answers[s:s + 16]), answers[s:s + 16]):
                tok_lp = lp[torch.arange(len(a)), torch.as_tensor(a)]
                res.append({"nll": (-tok_lp).tolist(), "ent": (-(lp.exp() * lp).sum(-1)).tolist(),
                            "rank": (lp > tok_lp[:, None]).sum(-1).tolist()})
            log(f"  {name}: {min(s + 16, len(rows))}/{len(rows)}")
        out[name] = res
    return out


def sentence_vectors(rows):
    from steerformer.steering.evaluation.judge import MiniLM, sentences

    texts = sorted({s for r in rows for s in sentences(r["answer"])})
    vecs = MiniLM()(texts)
    return {t: vecs[i].numpy() for i, t in enumerate(texts)}


def table(rows, feats, m, svec):
    from steerformer.steering.evaluation.judge import repetition, sentences

    base_of = {r["question"]: i for i, r in enumerate(rows) if r["method"] == "base"}
    half_ctx = {}
    for half in ("fit", "heldout"):
        qs = {r["question"]: i for i, r in enumerate(rows) if r["half"] == half and r["method"] == "base"}
        toks = [x for i in qs.values() for x in m["ctx"][i]["nll"]]
        half_ctx[half] = sum(toks) / len(toks)
    tab = []
    for i, r in enumerate(rows):
        x = {}
        for tag, key in (("f", "free"), ("c", "ctx")):
            n, e = np.array(m[key][i]["nll"]), np.array(m[key][i]["ent"])
            n3, e3 = n[3:], e[3:]
            x[f"{tag}_max"] = n3.max() if len(n3) else 0.0
            x[f"{tag}_top3"] = np.sort(n3)[-3:].mean() if len(n3) >= 3 else 0.0
            x[f"{tag}_q90"] = np.quantile(n3, .9) if len(n3) else 0.0
            for t in (5, 6, 8):
                x[f"{tag}_cnt{t}"] = float((n3 > t).sum())
            x[f"{tag}_sme_max"] = (n3 - e3).max() if len(n3) else 0.0
            low = e[1:] < 2.5
            x[f"{tag}_lowmax2.5"] = float(n[1:][low].max()) if low.any() else 0.0
            toks = m["tokens"][i]
            mid = [n[k] for k in range(1, len(toks)) if toks[k][:1].isalpha() and not toks[k].startswith("Ġ")
                   and re.match(r"[A-Za-z]", toks[k - 1][-1:] or "")]
            x[f"{tag}_mid_cnt4"] = float(sum(v > 4 for v in mid))
        x["f_ratio"] = feats[i]["nll_ratio"]
        x["c_ratio"] = float(np.mean(m["ctx"][i]["nll"])) / half_ctx[r["half"]]
        b = base_of[r["question"]]
        x["f_ratio_q"] = float(np.mean(m["free"][i]["nll"]) / np.mean(m["free"][b]["nll"]))
        x["c_ratio_q"] = float(np.mean(m["ctx"][i]["nll"]) / np.mean(m["ctx"][b]["nll"]))
        x["rep2"], x["dbl"], x["slips"] = feats[i]["repetition"], float(feats[i]["doubled"]), float(feats[i]["slips"])
        x["rep4"] = repetition(r["answer"], 4)
        words = re.findall(r"\w+", r["answer"].lower())
        x["near_repeat"] = float(sum(len(w) >= 4 and w in words[max(0, k - 4):k] for k, w in enumerate(words)))
        ss = sentences(r["answer"])
        plain = [re.sub(r"^\W*\d*[.)]?\s*", "", s).strip().lower() for s in ss]
        x["dup_sent"] = float(sum(s in plain[:k] for k, s in enumerate(plain) if s))
        x["neg_minconsec"] = -min((float(svec[a] @ svec[b]) for a, b in zip(ss, ss[1:])), default=1.0)
        tab.append(x)
    return {k: np.array([t[k] for t in tab], float) for k in tab[0]}


# ---- (1) threshold rules -----------------------------------------------------------------------------
def rate_rules(F, p, nu, extra, idx):
    rep, dbl, v = F["rep2"][idx], F["dbl"][idx], F[nu][idx]
    zero = (rep >= p["r0"]) | (dbl >= p["d0"]) | (v >= p["n0"]) | ((rep >= p["br"]) & (v >= p["bn"]))
    one = (rep >= p["r1"]) | (v >= p["n1"]) | (dbl >= p["d1"])
    for e in extra:
        one |= F[e][idx] >= p[e + "_1"]
        zero |= F[e][idx] >= p[e + "_0"]
    return np.where(zero, 0, np.where(one, 1, 2))


def fit_rules(F, Y, nu, extra, idx):
    from steerformer.steering.evaluation.agreement import cohen_kappa

    def grid(name):
        if name in ("r0", "br", "r1"):
            return [round(x, 3) for x in np.arange(0.05, 0.61, 0.025)] + [OFF]
        if name == "d0":
            return [2, 3, 4, 6, 8, OFF]
        if name == "d1":
            return [1, 2, 3, OFF]
        k = nu if name in ("n0", "bn", "n1") else name[:-2]
        return sorted(set(np.round(np.quantile(F[k][idx], np.linspace(0.02, 0.98, 49)), 4))) + [OFF]

    p = dict(r0=0.3, d0=2, n0=1.6, br=0.3, bn=1.3, r1=0.25, n1=1.25, d1=1)
    if nu != "f_ratio":
        p.update(zip(("n0", "bn", "n1"), np.quantile(F[nu][idx], [0.9, 0.7, 0.6])))
    for e in extra:
        p[e + "_1"], p[e + "_0"] = OFF, OFF
    kappa = lambda q: cohen_kappa(list(rate_rules(F, q, nu, extra, idx)), list(Y[idx]))
    best = kappa(p)
    for _ in range(4):
        changed = False
        for name in list(p):
            now = p[name]
            k, _, v = max((kappa({**p, name: v}), -abs(min(v, 10) - min(now, 10)), v) for v in grid(name))
            if k > best + 1e-12 and v != now:
                p[name], best, changed = v, k, True
        if not changed:
            break
    return p


# ---- (2) a linear score with two cuts --------------------------------------------------------------
def fit_ordinal(X, y, lam):
    from scipy.optimize import minimize

    d = X.shape[1]

    def loss(th):
        s = X @ th[:d]
        a0, a1 = th[d], th[d] + np.exp(th[d + 1])
        p_ge1, p_ge2 = 1 / (1 + np.exp(s - a1)), 1 / (1 + np.exp(s - a0))
        p = np.where(y == 0, 1 - p_ge1, np.where(y == 1, p_ge1 - p_ge2, p_ge2))
        return -np.log(np.clip(p, 1e-12, 1)).sum() + lam * th[:d] @ th[:d]

    return minimize(loss, np.zeros(d + 2), method="L-BFGS-B").x


def rate_ordinal(F, Y, names, lam, tr, te):
    X = np.stack([F[k] for k in names], 1)
    mu, sd = X[tr].mean(0), X[tr].std(0) + 1e-9
    X = (X - mu) / sd
    loop = (F["rep2"] >= 0.3) | (F["dbl"] >= 2)
    t = tr[~loop[tr]]
    th = fit_ordinal(X[t], Y[t], lam)
    d = len(names)
    s = X[te] @ th[:d]
    a0, a1 = th[d], th[d] + np.exp(th[d + 1])
    return np.where(loop[te], 0, np.where(s > a1, 0, np.where(s > a0, 1, 2))), (th, mu, sd)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default=str(ROOT / "runs" / "judge-fluency"))
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="the features of 2 answers per concept, no fit (the suite)")
    args = ap.parse_args()
    log = (lambda s: None) if args.quiet else (lambda s: print(s, flush=True))
    from bench_judge_agreement import load_labelled
    from steerformer.steering.evaluation.agreement import cohen_kappa

    if args.smoke:  # the feature code runs on real answers; the fit needs the whole set
        import tempfile

        per = collections.defaultdict(list)
        for r in load_labelled():
            per[r["concept"]].append(r)
        rows = [r for rs in per.values() for r in rs[:2]]
        with tempfile.TemporaryDirectory() as tmp:
            feats = cached(Path(tmp) / "judge_features.pkl", lambda: judge_features(rows), log)
            m = cached(Path(tmp) / "token_nll.pkl", lambda: model_features(rows, log), log)
            svec = sentence_vectors(rows)
        assert len(feats) == len(m["ctx"]) == len(m["free"]) == len(rows) and svec
        ctx = np.mean([np.mean(x["nll"]) for x in m["ctx"]])
        free = np.mean([np.mean(x["nll"]) for x in m["free"]])
        print(f"smoke: {len(rows)} answers; ratio of mean NLL after the question to after an empty turn {ctx / free:.3f}")
        return

    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    rows = load_labelled()
    feats = cached(cache / "judge_features.pkl", lambda: judge_features(rows), log)
    m = cached(cache / "token_nll.pkl", lambda: model_features(rows, log), log)
    svec = cached(cache / "sentence_vectors.pkl", lambda: sentence_vectors(rows), log)
    F = table(rows, feats, m, svec)
    Y = np.array([r["label"]["fluency"] for r in rows])
    H = np.array([r["half"] for r in rows])
    C = np.array([r["concept"] for r in rows])
    fit_idx, held = np.where(H == "fit")[0], np.where(H == "heldout")[0]
    for k in ("f_ratio", "c_ratio"):
        F["log_" + k] = np.log(F[k])
    F["dbl_c"] = np.minimum(F["dbl"], 3)

    def loco(score):
        ks = []
        for c in ("cats", "fire", "ocean"):
            tr, te = np.where((H == "fit") & (C != c))[0], np.where(C == c)[0]
            ks.append(cohen_kappa(list(score(tr, te)), list(Y[te])))
        return float(np.mean(ks))

    t0 = time.perf_counter()
    cands = []
    for nu in ("f_ratio", "f_ratio_q", "c_ratio", "c_ratio_q"):
        for ex in ([], ["c_q90"], ["c_max"], ["c_top3"], ["c_sme_max"], ["c_cnt6"], ["c_lowmax2.5"], ["f_top3"],
                   ["f_mid_cnt4"], ["slips"], ["dup_sent"], ["near_repeat"], ["rep4"], ["neg_minconsec"]):
            k = loco(lambda tr, te: rate_rules(F, fit_rules(F, Y, nu, ex, tr), nu, ex, te))
            cands.append((k, "rules", nu, tuple(ex)))
            log(f"rules ν={nu:10s} extra={str(ex):18s} LOCO κ {k:.3f}  ({time.perf_counter() - t0:.0f} s)")
    sets = {"R, D, ν_free": ["rep2", "dbl_c", "log_f_ratio"], "R, D, ν_ctx": ["rep2", "dbl_c", "log_c_ratio"],
            "R, D, ν_ctx, ν_free": ["rep2", "dbl_c", "log_c_ratio", "log_f_ratio"],
            "R, D, ν_ctx, q90_ctx": ["rep2", "dbl_c", "log_c_ratio", "c_q90"],
            "R, D, ν_ctx, ν_free, q90_ctx": ["rep2", "dbl_c", "log_c_ratio", "log_f_ratio", "c_q90"],
            "R, D, ν_ctx, ν_free, lowmax": ["rep2", "dbl_c", "log_c_ratio", "log_f_ratio", "c_lowmax2.5"]}
    for name, names in sets.items():
        for lam in (0.1, 1.0, 5.0):
            k = loco(lambda tr, te: rate_ordinal(F, Y, names, lam, tr, te)[0])
            cands.append((k, "score", name, lam))
            log(f"score [{name}] λ={lam:g} LOCO κ {k:.3f}")

    def held_out(c):
        if c[1] == "rules":
            p = fit_rules(F, Y, c[2], list(c[3]), fit_idx)
            return rate_rules(F, p, c[2], list(c[3]), held)
        return rate_ordinal(F, Y, sets[c[2]], c[3], fit_idx, held)[0]

    print("\n| candidate (chosen by LOCO κ on the fit half) | LOCO κ | held-out exact | held-out κ | label 0/1/2 rows: judge 0/1/2 |")
    print("|---|---|---|---|---|")
    today = (0, "rules", "f_ratio", ())
    best_rules = max(c for c in cands if c[1] == "rules")
    best_score = max(c for c in cands if c[1] == "score")
    fluency = {}
    for tag, c in (("today's rules, refitted", [x for x in cands if x[1:] == today[1:]][0]),
                   ("best threshold rules", best_rules), ("best linear score", best_score)):
        g = held_out(c)
        cm = collections.Counter(zip(Y[held], g))
        print(f"| {tag}: {c[1]} {c[2]} {c[3]} | {c[0]:.3f} | {np.mean(g == Y[held]):.2f} | "
              f"{cohen_kappa(list(g), list(Y[held])):.3f} | {[[cm[(a, b)] for b in range(3)] for a in range(3)]} |")
        fluency[tag] = g
        if c[1] == "score":  # the score in raw units: z = Σ w_k x_k, 1 when z > cut_1, 0 when z > cut_0
            names = sets[c[2]]
            th, mu, sd = rate_ordinal(F, Y, names, c[3], fit_idx, held)[1]
            w = th[:len(names)] / sd
            shift = float(w @ mu)
            print("  score: z = " + " + ".join(f"{x:.4g}·{k}" for x, k in zip(w, names))
                  + f"; fluency 1 when z > {th[len(names)] + shift:.4g}, 0 when z > "
                  f"{th[len(names)] + np.exp(th[len(names) + 1]) + shift:.4g} (after the loop rules)")

    # the whole judge on the held-out half: today's concept and relevance, each fluency above
    from bench_judge_agreement import agreement
    from steerformer.steering.evaluation.judge import OfflineJudge, Rating

    judge = OfflineJudge(embedder=lambda texts: None)
    today_ratings = [judge.rate(feats[i]) for i in held]
    print("\n| held-out half, fluency from | fluency exact / κ | good steers precision / recall | Spearman, groups / methods |")
    print("|---|---|---|---|")
    for tag, g in (("the offline judge today", None), *fluency.items()):
        ratings = today_ratings if g is None else [Rating(r.concept, r.relevance, int(v)) for r, v in zip(today_ratings, g)]
        a = agreement([rows[i] for i in held], ratings)
        print(f"| {tag} | {a['fluency']['exact']:.2f} / {a['fluency']['kappa']:.2f} | {a['good']['precision']:.2f} / "
              f"{a['good']['recall']:.2f} | {a['rank']['spearman']:.2f} / {a['rank']['methods_spearman']:.2f} |")
        if g is not None and tag == "best linear score":
            print("  per method (judge / labels): " + ", ".join(f"{k} {v['judge']:.2f}/{v['label']:.2f}"
                                                             for k, v in a["methods"].items()))


if __name__ == "__main__":
    main()
