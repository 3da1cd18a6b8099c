"""Cost of the beyond-chance test against the statistics it tests (docs/math.md §4c, issue 19):

    ratio = time(statistics + null) / time(statistics alone)           target ≤ 1.5

"statistics" is `power_method_stats` as `analyze` runs it (spectra, controlled dynamics, intervals,
cumulative product, full-model variant) with ``null_draws=0``; "+ null" the same with K draws.
Also prints where the null's time goes (the random layers' eigenproblems vs the batched dynamics)
and the two eigen-solvers of :func:`steerformer.eig.rightmost_eig` at the model's width.

Default model: the bundled MiniLM (6 layers, d = 384), 100 × 10 tokens, K = 100, float64, BLAS and
torch on one thread (the shared machine's timings are otherwise noise), best of two alternated rounds.

Run:  python benchmarks/bench_null.py [--draws 100] [--prompts 100] [--threads 1] [--smoke]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

# Measure this checkout, not whatever steerformer is installed.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import torch


def _timed(f):
    t0 = time.perf_counter()
    out = f()
    return time.perf_counter() - t0, out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draws", type=int, default=100, help="null draws K")
    ap.add_argument("--prompts", type=int, default=100)
    ap.add_argument("--tokens", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1, help="torch and BLAS threads")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help="tiny random BERT, 5 draws: checks the script runs")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from threadpoolctl import threadpool_limits

    threadpool_limits(args.threads)

    from steerformer.eig import rightmost_eig
    from steerformer.loading import open_source
    from steerformer.matrices import read_attention_weights
    from steerformer.stats import power_method_stats
    from steerformer.stats.null import null_statistics

    if args.smoke:
        from transformers import BertConfig, BertModel

        torch.manual_seed(0)
        model = BertModel(BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64,
                                     vocab_size=101, max_position_embeddings=32)).eval()
        src, draws, kw = open_source(model), 5, dict(n_prompts=4, n_tokens=5, full_model=False)
    else:
        src, draws, kw = open_source("minilm"), args.draws, dict(n_prompts=args.prompts, n_tokens=args.tokens)
    power_method_stats(src, null_draws=2, **{**kw, "n_prompts": 2})  # warm-up: imports, first-call allocations

    t_stats, t_both = [], []
    for _ in range(args.rounds):  # alternated, so both see the same machine
        t_stats.append(_timed(lambda: power_method_stats(src, null_draws=0, **kw))[0])
        dt, rep = _timed(lambda: power_method_stats(src, null_draws=draws, **kw))
        t_both.append(dt)
    a, b = min(t_stats), min(t_both)

    # Where the null's time goes: the same draws with the eigenproblems solved (empty cache) and
    # with them cached (dynamics and correlations only).
    weights = read_attention_weights(src)
    ids = sorted(weights)
    tokens = torch.nn.functional.normalize(torch.randn(kw["n_prompts"], kw["n_tokens"], src.adapter.d_model,
                                                       dtype=torch.float64), dim=-1)
    bases: dict = {}
    t_null, _ = _timed(lambda: null_statistics(src, weights, tokens, ids, draws, bases=bases))
    t_dyn, _ = _timed(lambda: null_statistics(src, weights, tokens, ids, draws, bases=bases))

    d = src.adapter.d_model
    g = torch.Generator().manual_seed(0)
    M = torch.randn(4, d, d, generator=g, dtype=torch.float64) @ torch.randn(4, d, d, generator=g, dtype=torch.float64)
    t_eig, _ = _timed(lambda: torch.linalg.eig(M))
    from steerformer import eig as eig_mod

    old = eig_mod.ARNOLDI_FROM
    eig_mod.ARNOLDI_FROM = 1  # force ARPACK
    try:
        t_arpack, _ = _timed(lambda: rightmost_eig(M))
    finally:
        eig_mod.ARNOLDI_FROM = old

    L = len(ids)
    print(f"model: {'tiny random BERT' if args.smoke else 'MiniLM'} ({L} layers, d={d}); tokens {kw['n_prompts']} x "
          f"{kw['n_tokens']}; K = {draws} draws; threads {args.threads}; best of {args.rounds}")
    print(f"statistics alone:                    {a:8.2f} s")
    print(f"statistics + null:                   {b:8.2f} s")
    print(f"null alone (K draws, eig solved):    {t_null:8.2f} s  ({t_null / (draws * L) * 1e3:.1f} ms per draw and layer)")
    print(f"  of which dynamics + correlations:  {t_dyn:8.2f} s  ({t_dyn / (draws * L) * 1e3:.1f} ms per draw and layer)")
    print(f"rightmost eigenvector at d={d}: batched LAPACK eig {t_eig / 4 * 1e3:.0f} ms, ARPACK {t_arpack / 4 * 1e3:.0f} ms "
          f"per matrix")
    print(f"ratio (statistics + null) / statistics = {b / a:.2f}   (target <= 1.5)")
    print(rep.summary())


if __name__ == "__main__":
    main()
