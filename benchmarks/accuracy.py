"""Bits of error of the generated code beside each framework's autodiff of the forward as written.

    python -m benchmarks.accuracy [--quick] [--suite NAME] [--points N (default 64)] [--seed S] [--plot DIR]
                                  [--markdown [--table accuracy|tanh_sigmoid|gelu_tanh|bessel_ie]]

Four suites: `rules/`, FPBench's hamming-ch3 (`benchmarks/fpbench/`, 28
textbook cancellations translated into forward-only rules),
`benchmarks/distributions/` (25 log-densities, log-masses, entropies and KL
divergences as torch.distributions, NumPyro, TFP and SciPy write them) and
`benchmarks/ml/` (28 losses, activations and normalisations as ML code
writes them the textbook way);
`--suite NAME` measures one of them. For each rule
that can be measured (`rulegen.check.accuracy`: a symbolic forward of real
inputs), points uniform over the float bit patterns of each input's domain
(the whole float line where the rule gives none), in float64 and float32;
each cell is the mean bits of error over the rule's partials (gradient) or
outputs (value) and the points, generated / autodiff. The summary line per
suite: the mean over its rules, how many rules' generated gradient is within
1 bit in every dtype and backend (and in float32 alone; and both again where
JAX's points with a subnormal input, which XLA reads as 0, are left out), how
many are worse than autodiff (a mean more than 1 bit above autodiff's in some
dtype or backend), and which are inf or nan at a point where the exact value
is a finite float. `--quick` samples 8 points per dtype and measures every
twelfth rule of `rules/`, every third of FPBench's suite and the first rule
of the others, to see that everything runs.
`--markdown` measures FPBench's suite and `rules/` and prints docs/accuracy.md's table of
their means: each cell generated (autodiff), the gradient's in bold.
`--table tanh_sigmoid` and `--table gelu_tanh` print instead the mean / max bits of f_tanh's and
f_sigmoid's derivatives and of f_gelu_tanh's value and derivative, generated (autodiff);
`--table bessel_ie` the float64 relative error in eps of the first two derivatives of i0e and i1e in
torch, of rules built here against autodiff of `torch.special`'s, at a few points of their tails.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.table import Layout, Table, quiet_if, request
from rulegen.check import CheckSession
from rulegen.check.accuracy import BACKENDS, DTYPES, RuleAccuracy, measure_rule
from rulegen.check.accuracy_report import WORSE_BITS, write_plot
from rulegen.spec.rules import Rule, read_rules, rule_files

ROOT = Path(__file__).resolve().parent.parent
SUITES = {
    "rules/": ROOT / "rules",
    "FPBench hamming-ch3": ROOT / "benchmarks" / "fpbench",
    "distributions": ROOT / "benchmarks" / "distributions",
    "ml": ROOT / "benchmarks" / "ml",
}
#: --quick shows that every suite is measured and printed, not how well: every twelfth rule of `rules/` (every rule
#: of it is measured by the `accuracy` check of the sweeps of `rulegen test` in tests/package, at more points), every
#: third of FPBench's suite (built and measured by no other test), and the first rule only (every sys.maxsize-th) of
#: the others, whose rules are searched on a cold build for minutes each.
_QUICK_EVERY = {"rules/": 12, "FPBench hamming-ch3": 3}
KINDS = (("gradient", True), ("value", False))
TABLES = ("accuracy", "tanh_sigmoid", "gelu_tanh", "bessel_ie")
#: The points of the bessel_ie table, as its header writes them.
BESSEL_POINTS = {"20": 20.0, "50": 50.0, "100": 100.0, "1e3": 1e3, "1e4": 1e4, "1e6": 1e6, "-30": -30.0}
BESSEL_RULES = """rules:
  - {name: ie0, inputs: [x], forward: bessel_i0e(x)}
  - {name: ie1, inputs: [x], forward: bessel_i1e(x)}
"""
TAIL_RULES = {"tanh_sigmoid": ("f_tanh", "f_sigmoid"), "gelu_tanh": ("f_gelu_tanh",)}
TAIL_COLUMNS = tuple(f"{dtype} {name}" for dtype in DTYPES for name in ("JAX", "torch"))
#: The suites of the markdown table, in its order.
TABLE_SUITES = ("FPBench hamming-ch3", "rules/")


def layout(table: str = TABLES[0]) -> Layout:
    if table == "tanh_sigmoid":
        return Layout(("", *TAIL_COLUMNS), TAIL_RULES[table])
    if table == "gelu_tanh":
        return Layout(("", *TAIL_COLUMNS), ("value", "derivative"))
    if table == "bessel_ie":
        return Layout(("x", *BESSEL_POINTS), ("i0e'", "i0e''", "i1e'", "i1e''"))
    labels = ["rules measured"]
    labels += [f"{kind} {dtype}, JAX / torch" for kind, _ in KINDS for dtype in DTYPES]
    labels += ["within 1 bit (gradient)", "worse than autodiff (gradient)"]
    return Layout(("mean bits of error, generated (autodiff)", *TABLE_SUITES), tuple(labels))


def tails(table: str, points: int, seed: int) -> Table:
    """Mean / max bits of error, generated (autodiff), of the rules of `TAIL_RULES[table]` in `rules/`."""
    every = read_rules(rule_files([SUITES["rules/"]]))
    rules = [r for r in every if r.name in TAIL_RULES[table]]
    with CheckSession(rules, "generated") as session:
        jax_pkg, torch_pkg = session.modules
        known = [r.name for r in every]
        results = [measure_rule(r, jax_pkg, torch_pkg, points=points, seed=seed, known=known) for r in rules]
    out = Table(list(layout(table).header))

    def cell(result: RuleAccuracy, partial: bool, dtype: str, backend: str) -> str:
        found = [
            [
                s
                for s in result.series
                if (s.quantity.is_partial, s.quantity.mode, s.dtype, s.backend, s.source)
                == (partial, "reverse", dtype, backend, source)
            ]
            for source in ("generated", "autodiff")
        ]
        generated, autodiff = (f"{sum(x.mean for x in f) / len(f):.2f} / {max(x.max for x in f):.0f}" for f in found)
        return f"{generated} ({autodiff})"

    for result in results:
        kinds = [(result.rule, True)] if table == "tanh_sigmoid" else [("value", False), ("derivative", True)]
        for label, partial in kinds:
            out.add(label, *(cell(result, partial, d, b) for d in DTYPES for b in BACKENDS))
    return out


def _eps(value: float) -> str:
    """An error in eps as docs/accuracy.md writes it: three digits, powers of ten from 10^4."""
    if value >= 1e4:
        mantissa, exponent = f"{value:.1e}".split("e")
        return f"{mantissa.removesuffix('.0')}e{int(exponent)}"
    if value >= 100:
        return f"{float(f'{value:.3g}'):,.0f}"
    if value >= 10:
        return f"{value:.0f}"
    return f"{value:.1f}" if value >= 0.05 else f"{value:.1g}"


def bessel_ie() -> Table:
    """i0e's and i1e's first two derivatives in torch float64, rules built here (autodiff of torch.special's)."""
    import importlib
    import tempfile

    import mpmath
    import torch

    from rulegen.render.build import build

    mpmath.mp.dps = 60
    eps = float(torch.finfo(torch.float64).eps)
    out = Table(list(layout("bessel_ie").header))
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "ie.yaml").write_text(BESSEL_RULES)
        build([Path(tmp) / "ie.yaml"], Path(tmp) / "bench_ie")
        sys.path.insert(0, tmp)
        try:
            package = importlib.import_module("bench_ie.torch")
        finally:
            sys.path.remove(tmp)
        for nu, generated, framework in ((0, package.ie0, torch.special.i0e), (1, package.ie1, torch.special.i1e)):
            for order in (1, 2):
                cells = []
                for x in BESSEL_POINTS.values():
                    exact = mpmath.diff(lambda t, nu=nu: mpmath.exp(-abs(t)) * mpmath.besseli(nu, t), x, order)

                    def error(f: object, x: float = x, exact: object = exact, order: int = order) -> str:
                        t = torch.tensor([x], dtype=torch.float64, requires_grad=True)
                        y = f(t)  # type: ignore[operator]
                        for _ in range(order):
                            (y,) = torch.autograd.grad(y.sum(), t, create_graph=True)
                        return _eps(float(abs((mpmath.mpf(float(y.detach())) - exact) / exact)) / eps)

                    cells.append(f"{error(generated)} ({error(framework)})")
                out.add(f"i{nu}e" + "'" * order, *cells)
    return out


def markdown_column(results: list[RuleAccuracy], rules: int) -> list[str]:
    """One suite's cells of the markdown table, in `layout()`'s order."""
    cells = [f"{len(results)} of {rules}"]
    for _, partials in KINDS:
        for dtype in DTYPES:
            means = {
                source: " / ".join(f"{_suite_mean(results, partials, dtype, b, source):.1f}" for b in BACKENDS)
                for source in ("generated", "autodiff")
            }
            generated = f"**{means['generated']}**" if partials else means["generated"]
            cells.append(f"{generated} ({means['autodiff']})")
    within = sum(_within_one_bit(r) for r in results)
    worse = sum(_worse_than_autodiff(r) for r in results)
    cells += [f"**{within} of {len(results)}**", f"**{worse}**"]
    return cells


def _cells(result: RuleAccuracy) -> list[str]:
    cells = []
    for _, partials in KINDS:
        for dtype in DTYPES:
            for backend in BACKENDS:
                generated, autodiff = (
                    result.mean_bits(partials=partials, dtype=dtype, backend=backend, source=source)
                    for source in ("generated", "autodiff")
                )
                cells.append(f"{generated:5.1f}/{autodiff:<5.1f}")
    return cells


def _within_one_bit(result: RuleAccuracy, dtypes: tuple[str, ...] = DTYPES, *, flushed_inputs: bool = True) -> bool:
    return all(
        result.mean_bits(partials=True, dtype=dtype, backend=backend, source="generated", flushed_inputs=flushed_inputs)
        <= 1.0
        for dtype in dtypes
        for backend in BACKENDS
    )


def _worse_than_autodiff(result: RuleAccuracy) -> bool:
    return any(
        result.mean_bits(partials=True, dtype=dtype, backend=backend, source="generated")
        > result.mean_bits(partials=True, dtype=dtype, backend=backend, source="autodiff") + WORSE_BITS
        for dtype in DTYPES
        for backend in BACKENDS
    )


def _suite_mean(results: list[RuleAccuracy], partials: bool, dtype: str, backend: str, source: str) -> float:
    means = [r.mean_bits(partials=partials, dtype=dtype, backend=backend, source=source) for r in results]
    means = [m for m in means if not math.isnan(m)]
    return sum(means) / len(means) if means else math.nan


@contextmanager
def _alone(rules: list[Rule], alone: bool) -> Iterator[list[Rule]]:
    """`rules`, where `alone` read from a file of their own: a session builds every rule of its rules' files, and
    --quick measures one rule of the 25 distributions, whose build took most of its time."""
    if not alone:
        yield rules
        return
    chunks = ["rules:\n"]
    for path in sorted({Path(r.source) for r in rules}):
        lines = path.read_text().splitlines(keepends=True)
        in_file = read_rules([path])
        # An entry runs from its first key's line to the next entry's.
        starts = [r.loc.line - 1 for r in in_file] + [len(lines)]
        chunks += [
            "".join(lines[start:end])
            for r, start, end in zip(in_file, starts, starts[1:], strict=False)
            if r.name in {m.name for m in rules}
        ]
    with tempfile.TemporaryDirectory(prefix="rulegen-accuracy-") as folder:
        path = Path(folder) / "measured.yaml"
        path.write_text("".join(chunks))
        measured = list(read_rules([path]))
        assert [r.name for r in measured] == [r.name for r in rules], "a rule's entry was cut wrongly"
        yield measured


def run_suite(
    title: str, folder: Path, points: int, seed: int, plot: Path | None, *, every: int = 1
) -> list[RuleAccuracy]:
    """The suite's table and summary; `every`: measure every so many of its rules (--quick: see _QUICK_EVERY)."""
    rules = list(read_rules(rule_files([folder]))[::every])
    started = time.perf_counter()
    # rules/ is generated/ (built first, as every benchmark needs); the others are built here.
    package = "generated" if folder == SUITES["rules/"] else None
    with _alone(rules, every > 1 and package is None) as rules, CheckSession(rules, package) as session:
        jax_pkg, torch_pkg = session.modules
        names = [r.name for r in rules]
        every = [measure_rule(r, jax_pkg, torch_pkg, points=points, seed=seed, known=names) for r in rules]
    results = [r for r in every if not r.skipped]
    print(f"\n{title}: {len(results)} of {len(rules)} rules measured, {points} points per dtype, seed {seed}")
    header = "".join(f"{f'{kind} {dtype}':<26}" for kind, _ in KINDS for dtype in DTYPES)
    print(f"{'generated/autodiff, mean bits':<32}{header}".rstrip())
    print((f"{'rule':<32}" + f"{'jax':<13}{'torch':<13}" * 4).rstrip())
    for result in results:
        print((f"{result.rule:<32}" + " ".join(f"{c:<12}" for c in _cells(result))).rstrip())
        if plot is not None:
            write_plot(result, plot)
    for kind, partials in KINDS:
        parts = []
        for dtype in DTYPES:
            for backend in BACKENDS:
                generated, autodiff = (
                    _suite_mean(results, partials, dtype, backend, source) for source in ("generated", "autodiff")
                )
                parts.append(f"{dtype} {backend} {generated:.1f}/{autodiff:.1f}")
        print(f"{title} mean bits, {kind} generated/autodiff: " + ", ".join(parts))

    def within(dtypes: tuple[str, ...] = DTYPES, *, flushed_inputs: bool = True) -> int:
        return sum(_within_one_bit(r, dtypes, flushed_inputs=flushed_inputs) for r in results)

    worse = [r.rule for r in results if _worse_than_autodiff(r)]
    broken = [r.rule for r in results if r.inadmissible()]
    print(
        f"{title} summary: {within()} of {len(results)} rules within 1 bit (gradient; float32 alone "
        f"{within(('float32',))}), {within(flushed_inputs=False)} (float32 "
        f"{within(('float32',), flushed_inputs=False)}) where JAX's points with a subnormal input, which XLA "
        f"reads as 0, are left out; {len(worse)} worse than autodiff (gradient)"
        f"{': ' + ', '.join(worse) if worse else ''}; {len(broken)} inf or nan where the exact value is finite"
        f"{': ' + ', '.join(broken) if broken else ''} ({time.perf_counter() - started:.0f} s)"
    )
    return results


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.accuracy", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="8 points per dtype, a twelfth of rules/, a third of FPBench's rules"
    )
    parser.add_argument("--suite", choices=list(SUITES), default=None, help="measure this suite only")
    parser.add_argument("--points", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", type=Path, default=None, help="write one HTML page per rule here")
    asked = request(argv, TABLES)
    args = parser.parse_args(asked.rest)
    points = 8 if args.quick else args.points
    if asked.markdown and asked.table != "accuracy":
        with quiet_if(True):
            table = bessel_ie() if asked.table == "bessel_ie" else tails(asked.table, points, args.seed)
        print(table.markdown())
        return 0
    if asked.markdown:
        columns = []
        with quiet_if(True):
            for title in TABLE_SUITES:
                results = run_suite(title, SUITES[title], points, args.seed, args.plot)
                columns.append(markdown_column(results, len(read_rules(rule_files([SUITES[title]])))))
        table = Table(list(layout().header))
        for label, *cells in zip(layout().labels, *columns, strict=True):
            table.add(label, *cells)
        print(table.markdown())
        return 0
    for title, folder in SUITES.items():
        if args.suite is not None and title != args.suite:
            continue
        every = _QUICK_EVERY.get(title, sys.maxsize) if args.quick else 1
        run_suite(title, folder, points, args.seed, args.plot, every=every)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
