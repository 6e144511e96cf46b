"""The `rulegen` command line: build, show, new, schema (and test, see `rulegen.check`)."""

from __future__ import annotations

import functools
import json
import math
import sys
import time
import tomllib
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from rich.console import RenderableType

    from rulegen.check import Check, Outcome
    from rulegen.render.build import BuildResult
    from rulegen.render.write import StabilisedRecord
    from rulegen.spec.rules import Rule

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Compile YAML derivative rules into JAX and PyTorch code.",
    pretty_exceptions_enable=False,
)
out_console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

EXIT_STALE = 1
EXIT_SPEC = 2
# The output cannot be written: a problem of the machine, not of the rules.
EXIT_ENVIRONMENT = 1


@dataclass(frozen=True)
class Config:
    rules: tuple[Path, ...]
    out: Path
    pyproject: Path | None = None  # where [tool.rulegen] was found; None: the defaults of the working directory
    package_name: str | None = None  # `package-name`: see `build --package-name`
    package_version: str | None = None  # `package-version`: see `build --package-version`
    accuracy: object = None  # `accuracy`: see `build --accuracy` (checked where it is used)


def load_config(start: Path | None = None) -> Config:
    """`[tool.rulegen]` of the nearest pyproject.toml; paths are relative to it."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            try:
                table = tomllib.loads(pyproject.read_text()).get("tool", {}).get("rulegen")
            except (OSError, tomllib.TOMLDecodeError):
                table = None
            if table is not None:
                rules = table.get("rules", ["rules"])
                rules = [rules] if isinstance(rules, str) else rules
                return Config(
                    tuple(folder / r for r in rules),
                    folder / table.get("out", "generated"),
                    pyproject,
                    table.get("package-name"),
                    table.get("package-version"),
                    table.get("accuracy"),
                )
    return Config((here / "rules",), here / "generated")


def rule_paths(given: Iterable[Path] | None, config: Config) -> list[Path]:
    """The rule files or folders a command works on: those given, else the project's; exit 2 where there are none."""
    if given:
        return list(given)
    if config.pyproject is None and not any(path.exists() for path in config.rules):
        message = (
            f"no rule files given, and no rules here: no pyproject.toml with [tool.rulegen] from {Path.cwd()} up, "
            "and no rules/ folder.\nName rule files or folders (`rulegen build path/to/rules --out path/to/package`), "
            'add [tool.rulegen] rules = ["rules"] to your project\'s pyproject.toml, '
            "or write a first rule with `rulegen new NAME`."
        )
        err_console.print(f"[red]error:[/red] {escape(message)}")
        raise typer.Exit(EXIT_SPEC)
    return list(config.rules)


def project_rules(files: Iterable[Path]) -> list[Rule]:
    """Every rule of the projects `files` belong to (their `[tool.rulegen] rules`) that reads without error.

    A rule may call rules of other files; `show`, `test` and pytest of one
    file take the callees from here.  Files that do not read are left out:
    a call into one is reported as an unknown name where it is.
    """
    from rulegen.spec.errors import SpecErrors
    from rulegen.spec.rules import read_rule_file, rule_files

    given = {_resolved(f) for f in files}
    folders = {r for f in files for r in load_config(f.parent if f.is_file() else f).rules}
    found: list[Rule] = []
    for path in rule_files(sorted(folders)):
        if _resolved(path) in given:
            continue
        try:
            found += read_rule_file(path)
        except SpecErrors:
            continue
    return found


def _resolved(path: Path) -> Path | None:
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return None


def _report_spec_errors(exc: BaseException) -> typer.Exit:
    from rulegen.spec.errors import SpecErrors

    assert isinstance(exc, SpecErrors)
    for error in exc.errors:
        where, message = escape(str(error.loc)), escape(error.message)
        err_console.print(f"[bold]{where}[/bold]: [red]error:[/red] {message}", soft_wrap=True)
    count = len(exc.errors)
    err_console.print(f"{count} error{'s' if count != 1 else ''}; nothing was written.")
    return typer.Exit(EXIT_SPEC)


RulesArg = Annotated[
    list[Path] | None,
    typer.Argument(help="Rule files or folders (default: [tool.rulegen] rules)", show_default=False),
]


class AccuracyPolicy(StrEnum):
    best = "best"
    balanced = "balanced"
    fast = "fast"


@app.command()
def build(
    rules: RulesArg = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Package folder to write")] = None,
    check: Annotated[bool, typer.Option("--check", help="Write nothing; exit 1 if OUT is stale")] = False,
    force: Annotated[bool, typer.Option("--force", help="Overwrite generated files edited by hand")] = False,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs", "-j", min=1, help="Derive rules in N worker processes (default: the available cores; 1: none)"
        ),
    ] = None,
    package_name: Annotated[
        str | None,
        typer.Option(
            "--package-name",
            help="Also write OUT/pyproject.toml: the package as a distribution NAME, importable as NAME "
            "(default: [tool.rulegen] package-name; none)",
        ),
    ] = None,
    package_version: Annotated[
        str | None,
        typer.Option(
            "--package-version",
            help="The version of that distribution, a PEP 440 version (default: [tool.rulegen] package-version; 0.1.0)",
        ),
    ] = None,
    accuracy: Annotated[
        AccuracyPolicy | None,
        typer.Option(
            "--accuracy",
            help="What the accuracy search keeps, for rules with no `accuracy` of their own: the most accurate "
            "form (best), the most accurate at most 1.25x the derived form's cost (balanced), the cheapest no "
            "less accurate than the derived form (fast) (default: [tool.rulegen] accuracy; best)",
        ),
    ] = None,
) -> None:
    """Validate the rules, derive what they lack, and write the package."""
    from rulegen.render.build import HandEditedError, OutputError, PackageNameError, available_cores
    from rulegen.render.build import build as run_build
    from rulegen.spec.errors import SpecErrors

    config = load_config()
    paths = rule_paths(rules, config)
    target = out or config.out
    package_name = _package_name(package_name or config.package_name)
    package_version = _package_version(package_version, config, package_name)
    policy = accuracy.value if accuracy is not None else build_accuracy(config)
    started = time.perf_counter()
    try:
        result = run_build(
            paths,
            target,
            check=check,
            force=force,
            jobs=jobs or available_cores(),
            package_name=package_name,
            package_version=package_version,
            accuracy=policy,
        )
    except SpecErrors as exc:
        raise _report_spec_errors(exc) from None
    except OutputError as exc:
        err_console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(EXIT_ENVIRONMENT) from None
    except PackageNameError as exc:
        err_console.print(f"[red]error:[/red] {escape(str(exc))}; nothing was written.")
        raise typer.Exit(EXIT_SPEC) from None
    except HandEditedError as exc:
        for path in exc.paths:
            err_console.print(f"{escape(str(target / path))}: [red]edited by hand[/red] since rulegen wrote it")
        err_console.print("Move your change into the rule, or pass --force to overwrite.")
        raise typer.Exit(EXIT_STALE) from None
    _report_build(result, target, check=check, seconds=time.perf_counter() - started)


def build_accuracy(config: Config) -> str | None:
    """The project's `[tool.rulegen] accuracy` (None where it names none); exit 2 where it is no policy."""
    value = config.accuracy
    if value is None or value in AccuracyPolicy.__members__:
        return value  # type: ignore[return-value]
    choices = ", ".join(AccuracyPolicy.__members__)
    err_console.print(
        f"[red]error:[/red] {escape(f'{config.pyproject}: [tool.rulegen] accuracy {value!r}')}: "
        f"one of {choices}; nothing was written."
    )
    raise typer.Exit(EXIT_SPEC)


def _package_name(name: str | None) -> str | None:
    """`name`, or exit 2 where it is no Python identifier."""
    import keyword
    import re

    if name is not None and (not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or keyword.iskeyword(name)):
        err_console.print(
            f"[red]error:[/red] --package-name {escape(repr(name))}: the name must be a Python identifier"
        )
        raise typer.Exit(EXIT_SPEC)
    return name


def _package_version(given: str | None, config: Config, package_name: str | None) -> str | None:
    """The distribution's version, `given` or the project's, normalised; exit 2 where it is no PEP 440 version."""
    from packaging.version import InvalidVersion, Version

    version = given if given is not None else config.package_version
    if version is None:
        return None
    source = "--package-version" if given is not None else f"{config.pyproject}: [tool.rulegen] package-version"
    problem = None
    if not isinstance(version, str):
        problem = 'the version must be a string, as "1.2.0"'
    elif package_name is None:
        problem = "a version needs a distribution: give --package-name (or [tool.rulegen] package-name) too"
    else:
        try:
            return str(Version(version))
        except InvalidVersion:
            problem = "not a PEP 440 version (as 1.2.0, 2.0rc1, 0.3.post1)"
    err_console.print(f"[red]error:[/red] {escape(f'{source} {version!r}: {problem}')}; nothing was written.")
    raise typer.Exit(EXIT_SPEC)


def _report_build(result: BuildResult, target: Path, *, check: bool, seconds: float) -> None:
    """What a build did, or with --check, what it would change (exit 1 where anything)."""
    changed = [*result.difference.written, *result.difference.removed]
    if check:
        if changed:
            for rel in changed:
                err_console.print(f"stale: {escape(str(target / rel))}")
            err_console.print(f"{escape(str(target))} is stale; run `rulegen build`.")
            raise typer.Exit(EXIT_STALE)
        out_console.print(f"{escape(str(target))} is up to date ({result.rules} rules, {seconds:.2f} s)")
        return
    out_console.print(
        f"{result.rules} rules -> {escape(str(target))}: {len(result.rebuilt)} file(s) derived, "
        f"{len(result.reused)} unchanged, {len(changed)} written, {seconds:.2f} s"
    )


@app.command()
def test(
    rules: RulesArg = None,
    seed: Annotated[int, typer.Option(help="Seed of the random points")] = 0,
    compile_: Annotated[
        bool, typer.Option("--compile", help="Also check torch.compile(fullgraph=True) (slow)")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the outcomes as JSON")] = False,
    wide: Annotated[
        bool, typer.Option("--wide", help="The table with every check's name spelled out (about 230 columns)")
    ] = False,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs", "-j", min=1, help="Check rules in N worker processes (default: the available cores; 1: none)"
        ),
    ] = None,
    only: Annotated[
        list[str] | None,
        typer.Option("--check", "-c", help="Run only this check (repeat for several; names: rulegen test --wide)"),
    ] = None,
    against: Annotated[
        list[str] | None,
        typer.Option(
            "--against",
            help="Check your own implementation of the rule instead: jax=MODULE:ATTR or torch=MODULE:ATTR "
            "(either or both; importable from the current directory)",
        ),
    ] = None,
) -> None:
    """Build the rules into a temporary package and run the checks on every rule.

    With --against, the checks run on implementations you already have, the rule as the reference.
    """
    if against:
        _audit(rules, against, seed=seed, include_compile=compile_, as_json=as_json, wide=wide, only=only)
        return
    from rich.progress import Progress

    from rulegen.check import outcomes_json, run_checks
    from rulegen.check.against import AUDIT_CHECKS, AgainstError, chosen_audit_checks, declared_audit_outcomes
    from rulegen.check.run import chosen_checks
    from rulegen.render.build import available_cores, with_accuracy
    from rulegen.spec.errors import SpecErrors
    from rulegen.spec.rules import callees, read_rules, rule_files

    config = load_config()
    policy = build_accuracy(config)
    files = rule_files(rule_paths(rules, config))
    try:
        found = with_accuracy(read_rules(files), policy)
    except SpecErrors as exc:
        raise _report_spec_errors(exc) from None
    # Implementations a rule declares (`checks.against`) are audited beside rulegen's code of it.
    declaring = [r for r in found if r.checks.against]
    audit_only = {c.name for c in AUDIT_CHECKS} - {c.name for c in chosen_checks(None)}
    try:
        columns = chosen_audit_checks(only) if declaring else None
        chosen_checks(only if not declaring or only is None else [c for c in only if c not in audit_only])
    except ValueError as exc:
        err_console.print(f"[bold red]error:[/bold red] {escape(str(exc))}")
        raise typer.Exit(2) from None
    if only is not None:
        only = [c for c in only if c not in audit_only]
    # Rules of other files that these call are built and checked with them, but not reported.
    checked = {r.name for r in found}
    found = (*found, *callees(found, project_rules(files)))
    with Progress(console=err_console, transient=True, disable=as_json) as progress:
        task = progress.add_task("checking", total=None)

        def advance(outcome: object) -> None:
            progress.update(task, description=f"{outcome.rule}: {outcome.check}")  # type: ignore[attr-defined]

        try:
            outcomes = run_checks(
                found,
                seed=seed,
                include_compile=compile_,
                progress=advance,
                jobs=jobs or available_cores(),
                only=only,
                accuracy=policy,
            )
        except SpecErrors as exc:
            raise _report_spec_errors(exc) from None
    outcomes = [o for o in outcomes if o.rule in checked]
    if declaring:
        try:
            outcomes += declared_audit_outcomes(
                declaring, found, seed=seed, include_compile=compile_, checks=columns or ()
            )
        except AgainstError as exc:
            err_console.print(f"[bold red]error:[/bold red] {escape(str(exc))}")
            raise typer.Exit(2) from None
    if as_json:
        sys.stdout.write(outcomes_json(outcomes) + "\n")
    else:
        _report_checks(outcomes, wide=wide, checks=columns)
    if any(o.status == "fail" for o in outcomes):
        raise typer.Exit(1)


def _audit(
    rules: list[Path] | None,
    against: list[str],
    *,
    seed: int,
    include_compile: bool,
    as_json: bool,
    wide: bool,
    only: list[str] | None,
) -> None:
    """`rulegen test RULE --against ...`: the user's implementations of one rule checked against it."""
    from rulegen.check import outcomes_json
    from rulegen.check.against import AgainstError, audit_file, chosen_audit_checks, parse_against
    from rulegen.spec.errors import SpecErrors
    from rulegen.spec.rules import rule_files

    try:
        checks = chosen_audit_checks(only)
        targets = parse_against(against)
        files = rule_files(rule_paths(rules, load_config()))
        if len(files) != 1:
            raise AgainstError(f"--against audits the rule of one rule file; {len(files)} given")
        outcomes = audit_file(
            files[0], targets, seed=seed, include_compile=include_compile, checks=checks, others=project_rules(files)
        )
    except (ValueError, AgainstError) as exc:
        err_console.print(f"[bold red]error:[/bold red] {escape(str(exc))}")
        raise typer.Exit(2) from None
    except SpecErrors as exc:
        raise _report_spec_errors(exc) from None
    if as_json:
        sys.stdout.write(outcomes_json(outcomes) + "\n")
    else:
        _report_checks(outcomes, wide=wide, checks=checks)
    if any(o.status == "fail" for o in outcomes):
        raise typer.Exit(1)


def _report_checks(outcomes: Sequence[Outcome], *, wide: bool, checks: Sequence[Check] | None = None) -> None:
    """The table of outcomes, then each failure, each reason for n/a, and the summary.

    The compact table (a mark per check under a two-letter code) and the
    lines after it fit the console; `wide` prints the table with the checks'
    names instead, whole, and the lines unwrapped.
    """
    from rich.measure import Measurement

    from rulegen.check import REGISTRY, compact_table, legend, report_table, summary

    columns = REGISTRY if checks is None else checks
    if wide:
        table = report_table(outcomes, columns)
        # A file or a pipe has no width to fit: print the table whole, not cut to 80 columns.
        whole = Measurement.get(out_console, out_console.options.update(width=10_000), table).maximum
        (out_console if out_console.is_terminal else Console(highlight=False, width=whole)).print(table)
    else:
        out_console.print(compact_table(outcomes, columns))
        out_console.print(legend(columns), soft_wrap=False)
    for o in outcomes:
        if o.status == "fail":
            out_console.print(f"[bold red]FAIL[/bold red] {o.rule} / {o.check}: {escape(o.detail)}", soft_wrap=wide)
    for check, reason in sorted({(o.check, o.detail) for o in outcomes if o.status == "n/a"}):
        out_console.print(f"[dim]n/a {check}: {escape(reason)}[/dim]", soft_wrap=wide)
    out_console.print(summary(outcomes))


class PlotFormat(StrEnum):
    html = "html"
    png = "png"


@app.command()
def accuracy(
    rules: RulesArg = None,
    points: Annotated[
        int, typer.Option("--points", min=1, help="Points drawn per dtype (each input's probe magnitudes on top)")
    ] = 256,
    seed: Annotated[int, typer.Option(help="Seed of the sampled points")] = 0,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", help="Write plots of each rule (with --front: of its fronts) into this folder"),
    ] = None,
    plot_format: Annotated[
        PlotFormat, typer.Option("--format", help="One HTML page (SVG) or one PNG (matplotlib) per rule")
    ] = PlotFormat.html,
    front: Annotated[
        bool,
        typer.Option(
            "--front",
            help="Instead: each searched quantity's forms on the front of bits of error against cost, and the one "
            "each accuracy policy keeps",
        ),
    ] = False,
) -> None:
    """Bits of error of every value and partial, generated code beside autodiff of the written forward."""

    from rulegen.check import CheckSession
    from rulegen.check.accuracy import backend_gaps, measure_rule
    from rulegen.check.accuracy_report import accuracy_table, write_plot
    from rulegen.check.accuracy_snippet import hand_written, snippet_accuracy
    from rulegen.check.subject import subject_of
    from rulegen.render.build import with_accuracy
    from rulegen.spec.errors import SpecErrors
    from rulegen.spec.rules import callees, read_rules, rule_files

    config = load_config()
    files = rule_files(rule_paths(rules, config))
    if front:
        _print_fronts(files, plot, plot_format.value)
        return
    try:
        policy = build_accuracy(config)
        found = with_accuracy(read_rules(files), policy)
        measured = {r.name for r in found}
        every = (*found, *callees(found, project_rules(files)))
        with CheckSession(every, accuracy=policy) as session:
            jax_pkg, torch_pkg = session.modules
            names = [r.name for r in every]
            for rule in (r for r in every if r.name in measured):
                snippets = hand_written(rule)
                if snippets:
                    # No exact expression: float32 against autodiff of the forward in float64, as `test` checks.
                    result = snippet_accuracy(subject_of(rule, jax_pkg, torch_pkg, seed, names))
                else:
                    result = measure_rule(rule, jax_pkg, torch_pkg, points=points, seed=seed, known=names)
                if result.skipped:
                    out_console.print(f"[dim]{rule.name}: not measured: {escape(result.skipped)}[/dim]")
                    continue
                out_console.print(accuracy_table(result))
                if snippets:
                    note = "the sample moved along the float line; --points and --plot are for sympy rules"
                    out_console.print(
                        f"[dim]{rule.name}: float32 against autodiff of the forward in float64, at {note}[/dim]"
                    )
                else:
                    for gap in backend_gaps(result):
                        # Folded at the console's width, as the table is; the paths below are not (a path cut
                        # across lines cannot be copied).
                        out_console.print(
                            f"[yellow]{rule.name}: the backends differ: {escape(gap)}[/yellow]", soft_wrap=False
                        )
                    if plot is not None:
                        written = write_plot(result, plot, plot_format.value)
                        out_console.print(f"[dim]wrote {escape(str(written))}[/dim]")
    except SpecErrors as exc:
        raise _report_spec_errors(exc) from None


def _print_fronts(files: Sequence[Path], plot: Path | None = None, plot_format: str = "html") -> None:
    """Each searched quantity of the rules in `files`: its forms on the front of bits of error against cost
    (rulegen.derive.stabilise.policy), and the form each policy keeps; with `plot`, one page (or PNG) of the
    fronts per rule in that folder."""
    from rich.table import Table

    from rulegen.check.accuracy_report import FrontForm, write_front_plot
    from rulegen.derive.partials import Derivation, derive_rule
    from rulegen.derive.stabilise import POLICIES
    from rulegen.derive.stabilise.cost import costs
    from rulegen.spec.errors import SpecErrors
    from rulegen.spec.rules import read_rules

    try:
        found = read_rules(files)
        known = tuple(r.name for r in (*found, *project_rules(files)))
        for rule in found:
            runs = {p: derive_rule(rule.model_copy(update={"accuracy": p}), known) for p in POLICIES}
            choices = {p: {c.quantity: c for c in d.choices} for p, d in runs.items() if isinstance(d, Derivation)}
            searched = [q for q, c in choices.get("best", {}).items() if not math.isnan(c.bits_before[0])]
            if not searched:
                out_console.print(f"[dim]{rule.name}: no quantity searched (screened accurate, or not sympy)[/dim]")
                continue
            fronts: list[tuple[str, list[FrontForm]]] = []
            for quantity in searched:
                forms: dict[object, tuple[str, tuple[float, float]]] = {}
                free: frozenset = frozenset()
                for policy in POLICIES:
                    chosen = choices[policy].get(quantity)
                    for family, form, means in () if chosen is None else chosen.front:
                        forms.setdefault(form, (family, means))
                    free = free or (frozenset() if chosen is None else chosen.free)
                shown = [
                    FrontForm(
                        str(form),
                        family,
                        means,
                        costs(form, free),
                        tuple(p for p in POLICIES if quantity in choices[p] and choices[p][quantity].chosen == form),
                    )
                    for form, (family, means) in forms.items()
                ]
                fronts.append((str(quantity), shown))
                table = Table(
                    title=f"{rule.name}: {quantity}",
                    caption="bits: mean bits of error, float64/float32; cost: torch eager/JAX jit "
                    "(rulegen.derive.stabilise.cost)",
                )
                for column in ("form", "family", "bits", "cost", "kept by"):
                    table.add_column(column, overflow="fold")
                for f in shown:
                    table.add_row(
                        escape(f.form),
                        escape(f.family),
                        "/".join(f"{b:.1f}" for b in f.bits),
                        "/".join(f"{c:.1f}" for c in f.cost),
                        ", ".join(f.kept_by),
                    )
                out_console.print(table)
            if plot is not None:
                written = write_front_plot(rule.name, fronts, plot, plot_format)
                out_console.print(f"[dim]wrote {escape(str(written))}[/dim]")
    except SpecErrors as exc:
        raise _report_spec_errors(exc) from None


class Backend(StrEnum):
    jax = "jax"
    torch = "torch"


@app.command()
def show(
    name: Annotated[str, typer.Argument(help="Rule name")],
    files: RulesArg = None,
    backend: Annotated[Backend | None, typer.Option("--backend", "-b")] = None,
    rules: Annotated[
        list[Path] | None, typer.Option("--rules", help="Rule files or folders (as the arguments after NAME)")
    ] = None,
    why: Annotated[
        bool,
        typer.Option("--why", help="Instead of the code: which forms the accuracy search chose, and their error"),
    ] = False,
) -> None:
    """Print the routes (rulegen/derive/routes.py) and the generated code of one rule."""
    from rich.syntax import Syntax

    from rulegen.derive.routes import describe
    from rulegen.render.build import display_path, generate, with_accuracy
    from rulegen.render.write import format_sources
    from rulegen.spec.errors import SpecErrors
    from rulegen.spec.rules import read_rules, rule_files

    config = load_config()
    paths = rule_paths([*(files or ()), *(rules or ())], config)
    try:
        shown = [display_path(path) for path in rule_files(paths)]
        found = with_accuracy(read_rules(shown), build_accuracy(config))
        rule = next((r for r in found if r.name == name), None)
        if rule is not None:
            known = {r.name for r in (*found, *project_rules(shown))}
            made = generate(rule, known)
            routes, generated = made.routes, format_sources(made.modules)
    except SpecErrors as exc:
        raise _report_spec_errors(exc) from None
    if rule is None:
        err_console.print(escape(f"no rule named {name!r}{_did_you_mean(name, [r.name for r in found])}"))
        raise typer.Exit(EXIT_SPEC)
    if why:
        out_console.print(_why_table(rule.name, made.stabilised, searched=made.searched, policy=rule.policy))
        return
    out_console.print(f"[dim]routes: {escape(describe(routes))}[/dim]")
    for rel, text in sorted(generated.items()):
        if backend is None or rel.startswith(backend.value):
            out_console.rule(rel)
            out_console.print(Syntax(text, "python", theme="ansi_dark", background_color="default"))


def _why_table(
    name: str, stabilised: Sequence[StabilisedRecord], *, searched: bool, policy: str = "best"
) -> RenderableType:
    """The search's choices for one rule, under accuracy `policy`, as `rulegen show NAME --why` prints them."""
    from rich.table import Table
    from rich.text import Text

    if not searched:
        return Text(f"{name}: Python bodies, computed as written (the accuracy search works on sympy expressions)")
    if not stabilised:
        return Text(
            f"{name}: every quantity is computed as derived (accuracy: {policy}; no other form measured more "
            "accurate, or none the policy keeps)"
        )

    def bits(pair: tuple[float, float]) -> str:
        return "/".join("-" if b != b else f"{b:.1f}" for b in pair)

    table = Table(
        title=f"{name}: forms the accuracy search chose (accuracy: {policy})",
        caption="bits: mean bits of error against the correctly rounded value, float64/float32",
    )
    for column in ("quantity", "family", "as derived", "as computed", "bits before", "bits after"):
        table.add_column(column, overflow="fold")
    for c in stabilised:
        table.add_row(
            c.quantity, c.family, escape(c.derived), escape(c.chosen), bits(c.bits_before), bits(c.bits_after)
        )
    return table


#: The JSON Schema of rule files, written beside a new rule: editors with YAML
#: support (VS Code's YAML extension, any client of yaml-language-server)
#: read the first line of the rule and complete and check it as you type.
SCHEMA_FILE = "rulegen.schema.json"
MODELINE = f"# yaml-language-server: $schema={SCHEMA_FILE}\n"


def _did_you_mean(name: str, known: Sequence[str]) -> str:
    """A hint naming the rules whose names are near `name` (a prefix, or a few letters off), or nothing."""
    import difflib

    near = [k for k in known if k.startswith(name) or name.startswith(k)]
    near += [k for k in difflib.get_close_matches(name, known, n=3, cutoff=0.6) if k not in near]
    if not near:
        return f" among {len(known)} rules" if known else ""
    return f"; did you mean {' or '.join(repr(k) for k in near[:3])}?"


STARTER = """\
# A rulegen rule: `rulegen build` turns it into JAX and PyTorch code.
# Every key is in rulegen's guide (docs/guide.md) and in `rulegen schema` (JSON Schema).
name: {name}
doc: What {name} computes, in one line; it becomes the docstring.
inputs: [{x}]                 # or a mapping: {x}: {{diff: true, domain: [0.5, 3], assume: positive, shape: [3, 4]}}
                            # domain: where `rulegen test` samples (it never changes the code);
                            # assume: what sympy may simplify with (calls outside it are the caller's error)
forward: {x} * tanh({x})        # a sympy expression, applied elementwise
# Optional: partials (derived by sympy.diff when left out), or a jvp / vjp.
# derivatives:
#   {x}: tanh({x}) + {x} * (1 - tanh({x})**2)
checks:
  points:
    - at: {{{x}: 0.0}}
      value: 0.0
      grad: {{{x}: 0.0}}
"""

#: The starter's input, by preference: the first that the rule's name leaves free (a rule `x` takes `u`).
STARTER_INPUTS = ("x", "u", "v")


def _starter(name: str) -> str:
    """A starter rule named `name` that `rulegen build` accepts; exit 2 where no rule can take the name."""
    import tempfile

    from rulegen.spec.errors import SpecErrors
    from rulegen.spec.rules import read_rule_file

    problems: list[str] = []
    with tempfile.TemporaryDirectory() as scratch:
        for x in STARTER_INPUTS:
            text = STARTER.format(name=name, x=x)
            trial = Path(scratch) / f"{name}.yaml"
            trial.write_text(text)
            try:
                read_rule_file(trial)
            except SpecErrors as exc:
                problems += [e.message for e in exc.errors]
                continue
            return text
    err_console.print(
        f"[red]error:[/red] no rule can be named {escape(repr(name))}: {escape(problems[0])}; nothing was written."
    )
    raise typer.Exit(EXIT_SPEC)


@app.command()
def new(
    name: Annotated[str, typer.Argument(help="snake_case name of the new rule")],
    folder: Annotated[
        Path | None, typer.Option("--dir", help="Where to write it (default: the first rules folder)")
    ] = None,
) -> None:
    """Write a commented starter rule."""
    import re

    if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        err_console.print(f"{escape(repr(name))} is not a snake_case identifier")
        raise typer.Exit(EXIT_SPEC)
    text = _starter(name)
    target_dir = folder or load_config().rules[0]
    if target_dir.exists() and not target_dir.is_dir():
        err_console.print(
            f"[red]error:[/red] {escape(str(target_dir))} is a file; --dir names the folder to write {name}.yaml in"
        )
        raise typer.Exit(EXIT_SPEC)
    path = target_dir / f"{name}.yaml"
    if path.exists():
        err_console.print(f"{escape(str(path))} exists; not overwritten")
        raise typer.Exit(EXIT_SPEC)
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(MODELINE + text)
    except OSError as exc:
        why = escape(str(exc.strerror or exc))
        err_console.print(f"[red]error:[/red] cannot write {escape(str(path))}: {why}; nothing was written.")
        raise typer.Exit(EXIT_SPEC) from None
    out_console.print(f"wrote {escape(str(path))}")
    _write_schema(target_dir / SCHEMA_FILE)


def _write_schema(path: Path) -> None:
    """The rule format's JSON Schema at `path` (the file the modeline names), unless it is there already."""
    text = _schema_text()
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
        out_console.print(f"wrote {escape(str(path))} (the JSON Schema your editor checks rule files with)")


@app.command()
def schema() -> None:
    """Print the JSON Schema of the rule format (for editors' YAML support)."""
    sys.stdout.write(_schema_text())


@functools.cache
def _schema_text() -> str:
    """The rule format's JSON Schema as text, made once per process (pydantic builds it afresh at each call)."""
    from rulegen.spec.rules import json_schema

    return json.dumps(json_schema(), indent=2) + "\n"


def main() -> None:
    app()
