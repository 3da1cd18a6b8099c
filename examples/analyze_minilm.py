"""Spectra and statistics of the real MiniLM's layer matrices, from the Python API (offline).

    python examples/analyze_minilm.py [OUT_DIR] [NULL_DRAWS]

NULL_DRAWS random-weight draws make the null model that says which layers beat chance (default 100,
about a minute on one core; 10 take seconds, with a coarser test: the smallest p is 1/11).
"""

from __future__ import annotations

import sys

import steerformer as sf


def main(out_dir: str = "runs/example-minilm", null_draws: str | int = 100) -> None:
    report = sf.analyze("sentence-transformers/all-MiniLM-L6-v2", null_draws=int(null_draws))
    print(report.table())
    sp = report.spectra
    for i, (k, case) in enumerate(zip(report.layer_ids, sp.case)):
        kind = {1: "real dominant λ1", 2: "complex dominant pair", 3: "no strictly dominant λ"}[case]
        print(f"layer {k}: {kind}, gap {float(sp.gap[i]):.3g}")
    paths = report.save(out_dir)
    print(f"wrote {len(paths)} files to {out_dir}/")


if __name__ == "__main__":
    main(*sys.argv[1:])
