"""What `rulegen accuracy` shows: a table per rule, and plots per rule.

The plots show bits of error against the first input's position on the
float line of each dtype (the axis the points are sampled along, labelled
with powers of ten), the generated code beside the framework's autodiff.
They are SVG drawn here, one self-contained HTML page per rule, so that no
plotting library is needed; `format="png"` draws one PNG per rule with
matplotlib instead (`pip install matplotlib`).
"""

from __future__ import annotations

import html
import math
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
