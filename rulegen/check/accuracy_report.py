"""What `rulegen accuracy` shows: a table per rule, and plots per rule.

The plots show bits of error against the first input's position on the
float line of each dtype (the axis the points are sampled along, labelled
with powers of ten), the generated code beside the framework's autodiff.
They are SVG drawn here, one self-contained HTML page per rule, so that no
plotting library is needed; `format="png"` draws one PNG per rule with
matplotlib instead (`pip install matplotlib`).

`write_front_plot` draws what `rulegen accuracy --front` prints: per searched
quantity and backend, the forms on the front as mean bits of error (float64
and float32) against cost, each marked with the policies that keep it.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rulegen.check.accuracy import BACKENDS, DTYPES, SOURCES, Quantity, RuleAccuracy
from rulegen.derive.measure import ordinals

# Generated code more than this many bits worse than autodiff (mean over the points) is marked.
WORSE_BITS = 1.0


def accuracy_table(result: RuleAccuracy) -> Any:
    """A Rich table of one rule: mean / max bits per quantity, dtype, backend and source (fits 100 columns)."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"{result.rule}: bits of error, mean / max", title_justify="left")
    table.add_column("quantity", no_wrap=True)
    table.add_column("dtype")
    for backend in BACKENDS:
        for source in SOURCES:
            table.add_column(f"{backend} {'gen.' if source == 'generated' else source}", justify="right")
    for quantity in result.quantities:
        for dtype in result.dtypes:
            cells = []
            for backend in BACKENDS:
                generated = result.get(quantity, dtype, backend, "generated")
                autodiff = result.get(quantity, dtype, backend, "autodiff")
                if generated is None or autodiff is None:  # autodiff of a snippet forward runs in one backend
                    cells += ["n/a", "n/a"]
                    continue
                worse = generated.mean > autodiff.mean + WORSE_BITS
                cells.append(_cell(generated.mean, generated.max, "bold red" if worse else ""))
                cells.append(_cell(autodiff.mean, autodiff.max, ""))
            table.add_row(quantity.label, dtype, *cells)
    # An implementation that raised is counted as nan everywhere; say why beneath.
    failures = dict.fromkeys(f"{s.backend} {s.source}, {s.dtype}: {escape(s.note)}" for s in result.series if s.note)
    if failures:
        table.caption = "\n".join(failures)
    return table


def _cell(mean: float, largest: float, style: str) -> str:
    text = f"{mean:.2f} / {largest:.0f}"
    return f"[{style}]{text}[/{style}]" if style else text


# ---------------------------------------------------------------- plots

_WIDTH, _HEIGHT, _MARGIN = 640, 220, 44
_COLOURS = {
    ("jax", "generated"): "#1f77b4",
    ("torch", "generated"): "#2ca02c",
    ("jax", "autodiff"): "#d62728",
    ("torch", "autodiff"): "#ff7f0e",
}
#: Tick labels on an axis, at most: "-1e-300" is seven characters, and an axis of 640 pixels holds nine.
_MOST_TICKS = 9


def write_plot(result: RuleAccuracy, folder: Path, format: str = "html") -> Path:
    """`folder/<rule>.html` (or `.png`): per quantity and dtype, bits of error against the first input,
    generated vs autodiff."""
    folder.mkdir(parents=True, exist_ok=True)
    if format == "png":
        return _write_png(result, folder / f"{result.rule}.png")
    sections = [
        f"<h2>{html.escape(quantity.label)}, {dtype}</h2>\n{_svg(result, quantity, dtype)}"
        for quantity in result.quantities
        for dtype in DTYPES
    ]
    legend = " ".join(
        f'<span style="color:{colour}">&#9679; {backend} {source}</span>'
        for (backend, source), colour in _COLOURS.items()
    )
    page = (
        f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(result.rule)}: accuracy</title>"
        "<style>body{font-family:sans-serif;margin:2em}</style></head><body>\n"
        f"<h1>{html.escape(result.rule)}: bits of error</h1>\n<p>{legend}</p>\n"
        "<p>x: the first input, along the float line of each dtype (the points are uniform over its bit "
        "patterns); y: bits of error, 0 for the correctly rounded value.</p>\n"
        + "\n".join(sections)
        + "\n</body></html>\n"
    )
    path = folder / f"{result.rule}.html"
    path.write_text(page)
    return path


def _positions(result: RuleAccuracy, dtype: str) -> np.ndarray:
    """The first input's points as positions on the float line of `dtype` itself."""
    inputs = result.inputs[dtype]
    return ordinals(next(iter(inputs.values())).astype(DTYPES[dtype])).astype(np.float64)


def _ticks(lo: float, hi: float, dtype: str) -> list[tuple[float, str]]:
    """Powers of ten of `dtype` between the positions lo and hi, none closer than 1/`_MOST_TICKS` of the axis to
    another (so that no labels overlap): 0 and 1 first, then exponents that are multiples of 100, of 10, any,
    then 2 and 5 times a power of ten (a narrow domain)."""
    info = np.finfo(DTYPES[dtype])
    smallest, largest = (math.floor(math.log10(float(v))) for v in (info.smallest_subnormal, info.max))
    exponents = sorted(range(smallest, largest + 1), key=lambda e: (e != 0, e % 100 != 0, e % 10 != 0, abs(e)))
    candidates = [0.0, *(s * m * 10.0**e for m in (1.0, 2.0, 5.0) for e in exponents for s in (1.0, -1.0))]
    gap = (hi - lo) / _MOST_TICKS
    kept: list[tuple[float, str]] = []
    for value in (v for v in candidates if abs(v) <= float(info.max)):
        position = float(ordinals(np.asarray(value, dtype=DTYPES[dtype])))
        if lo <= position <= hi and all(abs(position - p) >= gap for p, _ in kept):
            label = "0" if value == 0 else f"{value:.0e}".replace("e+", "e").replace("e0", "e").replace("e-0", "e-")
            kept.append((position, label))
    return sorted(kept)


def _write_png(result: RuleAccuracy, path: Path) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError as exc:
        raise RuntimeError("PNG plots need matplotlib: pip install matplotlib") from exc
    panels = [(quantity, dtype) for quantity in result.quantities for dtype in DTYPES]
    figure, axes = pyplot.subplots(len(panels), 1, figsize=(8, 2.4 * len(panels)), squeeze=False)
    for axis, (quantity, dtype) in zip(axes[:, 0], panels, strict=True):
        xs = _positions(result, dtype)
        for (backend, source), colour in _COLOURS.items():
            bits = result.find(quantity, dtype, backend, source).bits
            axis.scatter(xs, bits, s=4, color=colour, alpha=0.6, label=f"{backend} {source}")
        ticks = _ticks(float(xs.min()), float(xs.max()), dtype)
        axis.set_xticks([p for p, _ in ticks], [label for _, label in ticks])
        axis.set_ylim(-1, np.dtype(DTYPES[dtype]).itemsize * 8 + 1)
        axis.set_ylabel("bits of error")
        axis.set_title(f"{result.rule}: {quantity.label}, {dtype}", fontsize=10, loc="left")
    axes[0, 0].legend(loc="upper right", fontsize=8, markerscale=3)
    axes[-1, 0].set_xlabel("the first input, along the float line (uniform over its bit patterns)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
    return path


def _svg(result: RuleAccuracy, quantity: Quantity, dtype: str) -> str:
    xs = _positions(result, dtype)
    lo, hi = float(xs.min()), float(xs.max())
    span = hi - lo or 1.0
    top = float(np.dtype(DTYPES[dtype]).itemsize * 8)

    def x_of(position: float) -> float:
        return _MARGIN + (position - lo) / span * (_WIDTH - 2 * _MARGIN)

    def y_of(bits: float) -> float:
        return _HEIGHT - _MARGIN + -bits / top * (_HEIGHT - 2 * _MARGIN)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT}">']
    parts.append(_axes(x_of, y_of, _ticks(lo, hi, dtype), top))
    for (backend, source), colour in _COLOURS.items():
        bits = result.find(quantity, dtype, backend, source).bits
        for x, b in zip(xs, bits, strict=True):
            parts.append(f'<circle cx="{x_of(x):.1f}" cy="{y_of(b):.1f}" r="1.6" fill="{colour}" fill-opacity="0.6"/>')
    parts.append("</svg>")
    return "\n".join(parts)


def _axes(x_of: Any, y_of: Any, ticks: list[tuple[float, str]], top: float) -> str:
    bottom = y_of(0.0)
    lines = [
        f'<line x1="{_MARGIN}" y1="{bottom:.1f}" x2="{_WIDTH - _MARGIN}" y2="{bottom:.1f}" stroke="black"/>',
        f'<line x1="{_MARGIN}" y1="{y_of(top):.1f}" x2="{_MARGIN}" y2="{bottom:.1f}" stroke="black"/>',
    ]
    for bits in (0.0, top / 2, top):
        lines.append(
            f'<text x="{_MARGIN - 6}" y="{y_of(bits) + 4:.1f}" font-size="10" text-anchor="end">{bits:.0f}</text>'
        )
    for position, label in ticks:
        lines.append(
            f'<text x="{x_of(position):.1f}" y="{bottom + 14:.1f}" font-size="10" text-anchor="middle">{label}</text>'
        )
    return "\n".join(lines)


# ---------------------------------------------------------------- fronts


@dataclass(frozen=True)
class FrontForm:
    """One form on a quantity's front: its mean bits of error (float64, float32), its cost per backend
    (`rulegen.derive.stabilise.cost.BACKENDS`) and the policies that keep it."""

    form: str
    family: str
    bits: tuple[float, ...]
    cost: tuple[float, ...]
    kept_by: tuple[str, ...]


#: The dtypes of `FrontForm.bits`, and their colours.
_FRONT_DTYPES = {"float64": "#1f77b4", "float32": "#2ca02c"}


def _front_backends() -> tuple[str, ...]:
    from rulegen.derive.stabilise.cost import BACKENDS as COSTED

    return COSTED


def write_front_plot(
    rule: str, fronts: Sequence[tuple[str, Sequence[FrontForm]]], folder: Path, format: str = "html"
) -> Path:
    """`folder/<rule>.front.html` (or `.png`): per quantity and backend, mean bits of error against cost of the
    forms in `fronts` ((quantity, forms) pairs), each point labelled with the policies that keep it."""
    folder.mkdir(parents=True, exist_ok=True)
    panels = [
        (quantity, forms, b, backend) for quantity, forms in fronts for b, backend in enumerate(_front_backends())
    ]
    if format == "png":
        return _write_front_png(rule, panels, folder / f"{rule}.front.png")
    sections = [
        f"<h2>{html.escape(quantity)}, cost in {backend}</h2>\n{_front_svg(forms, b)}"
        for quantity, forms, b, backend in panels
    ]
    legend = " ".join(f'<span style="color:{colour}">&#9679; {dtype}</span>' for dtype, colour in _FRONT_DTYPES.items())
    rows = "\n".join(
        f"<tr><td>{html.escape(f.form)}</td><td>{html.escape(f.family)}</td>"
        f"<td>{'/'.join(f'{b:.1f}' for b in f.bits)}</td><td>{'/'.join(f'{c:.1f}' for c in f.cost)}</td>"
        f"<td>{html.escape(', '.join(f.kept_by))}</td></tr>"
        for _, forms in fronts
        for f in forms
    )
    page = (
        f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(rule)}: fronts</title>"
        "<style>body{font-family:sans-serif;margin:2em} td{padding:0 .6em}</style></head><body>\n"
        f"<h1>{html.escape(rule)}: bits of error against cost</h1>\n<p>{legend}</p>\n"
        "<p>x: the form's cost in the backend (rulegen.derive.stabilise.cost); y: mean bits of error; "
        "labels: the policies that keep the form.</p>\n"
        + "\n".join(sections)
        + "\n<table><tr><th>form</th><th>family</th><th>bits float64/float32</th><th>cost "
        + "/".join(_front_backends())
        + "</th><th>kept by</th></tr>\n"
        + rows
        + "\n</table>\n</body></html>\n"
    )
    path = folder / f"{rule}.front.html"
    path.write_text(page)
    return path


def _front_limits(forms: Sequence[FrontForm], backend: int) -> tuple[float, float]:
    """The largest cost and bits an axis shows (never 0, so that one form at the origin still draws)."""
    right = max((f.cost[backend] for f in forms), default=0.0) * 1.1 or 1.0
    top = max((b for f in forms for b in f.bits if math.isfinite(b)), default=0.0) * 1.1 or 1.0
    return right, top


def _front_svg(forms: Sequence[FrontForm], backend: int) -> str:
    right, top = _front_limits(forms, backend)

    def x_of(c: float) -> float:
        return _MARGIN + c / right * (_WIDTH - 2 * _MARGIN)

    def y_of(bits: float) -> float:
        return _HEIGHT - _MARGIN - min(bits, top) / top * (_HEIGHT - 2 * _MARGIN)

    bottom = y_of(0.0)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT}">',
        f'<line x1="{_MARGIN}" y1="{bottom:.1f}" x2="{_WIDTH - _MARGIN}" y2="{bottom:.1f}" stroke="black"/>',
        f'<line x1="{_MARGIN}" y1="{y_of(top):.1f}" x2="{_MARGIN}" y2="{bottom:.1f}" stroke="black"/>',
    ]
    for bits in (0.0, top / 2, top):
        parts.append(
            f'<text x="{_MARGIN - 6}" y="{y_of(bits) + 4:.1f}" font-size="10" text-anchor="end">{bits:.1f}</text>'
        )
    for c in (0.0, right / 2, right):
        parts.append(
            f'<text x="{x_of(c):.1f}" y="{bottom + 14:.1f}" font-size="10" text-anchor="middle">{c:.1f}</text>'
        )
    for f in forms:
        for (dtype, colour), bits in zip(_FRONT_DTYPES.items(), f.bits, strict=False):
            if not math.isfinite(bits):
                continue
            cx, cy = x_of(f.cost[backend]), y_of(bits)
            parts.append(
                f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="3" fill="{colour}"><title>{html.escape(f.form)}, '
                f"{dtype}: {bits:.2f} bits</title></circle>"
            )
        if f.kept_by:
            label = html.escape(", ".join(f.kept_by))
            cy = y_of(max((b for b in f.bits if math.isfinite(b)), default=0.0))
            parts.append(f'<text x="{x_of(f.cost[backend]) + 5:.1f}" y="{cy - 5:.1f}" font-size="10">{label}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def _write_front_png(rule: str, panels: Sequence[tuple[str, Sequence[FrontForm], int, str]], path: Path) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError as exc:
        raise RuntimeError("PNG plots need matplotlib: pip install matplotlib") from exc
    figure, axes = pyplot.subplots(len(panels), 1, figsize=(8, 2.6 * len(panels)), squeeze=False)
    for axis, (quantity, forms, backend, name) in zip(axes[:, 0], panels, strict=True):
        for (dtype, colour), k in zip(_FRONT_DTYPES.items(), range(2), strict=True):
            points = [(f.cost[backend], f.bits[k]) for f in forms if math.isfinite(f.bits[k])]
            axis.scatter([c for c, _ in points], [b for _, b in points], s=14, color=colour, label=dtype)
        for f in forms:
            if f.kept_by:
                highest = max((b for b in f.bits if math.isfinite(b)), default=0.0)
                axis.annotate(
                    ", ".join(f.kept_by),
                    (f.cost[backend], highest),
                    fontsize=8,
                    xytext=(4, 4),
                    textcoords="offset points",
                )
        right, top = _front_limits(forms, backend)
        axis.set_xlim(0, right)
        axis.set_ylim(0, top)
        axis.set_xlabel(f"cost in {name}")
        axis.set_ylabel("mean bits of error")
        axis.set_title(f"{rule}: {quantity}, cost in {name}", fontsize=10, loc="left")
    axes[0, 0].legend(loc="upper right", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
    return path
