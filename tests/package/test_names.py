"""Names in built packages: every name is the rule's or reserved, and collisions are refused where they are."""

from __future__ import annotations

import ast
import collections
import math
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rulegen.cli import app
from rulegen.render.build import build
from rulegen.spec import names
from rulegen.spec.rules import Structured, read_rules, rule_files
from tests.conftest import RIGHT, RULES, bundled_package, right_rules_built
from tests.spec.test_names import BUNDLED


def _identifiers(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, ast.arg):
            found.add(node.arg)
        elif isinstance(node, ast.alias):
            found.add((node.asname or node.name).split(".")[0])
    return found


def _ctx_attributes(tree: ast.AST, ctx: str) -> set[str]:
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == ctx
    }


@pytest.mark.parametrize("folder", BUNDLED, ids=lambda p: p.name)
def test_every_name_in_generated_code_is_the_rules_or_reserved(tmp_path, tmp_path_factory, folder):
    """A template or planner that starts using a new name of its own fails here until rulegen.spec.names reserves it."""
    rules = read_rules(rule_files([folder]))
    if folder == RULES:  # built already: generated/ when fresh (see bundled_package), not a third build of it
        root, package = bundled_package(tmp_path_factory)
        out = root / package
    elif folder == RIGHT:  # the build the sweep of every check reads (right_package)
        out = right_rules_built(tmp_path_factory) / "rg_right"
    else:
        out = tmp_path / "pkg"
        build([folder], out)
    every_rule = {r.name for r in rules} | {r.torch_class for r in rules}
    unexplained: dict[str, set[str]] = {}
    for rule in rules:
        own = {i.name for i in rule.inputs} | {o.name for o in rule.outputs} | set(rule.residual_names)
        own |= {p.name for p in rule.parameters if isinstance(p, Structured)}
        named_tuples = rule.returns.named_tuples if rule.returns is not None else ()
        own |= {n.name for n in named_tuples} | {field for n in named_tuples for field, _ in n.items}
        derived = {generated for generated, _ in names.derived_names(rule.name, own, rule.residual_names)}
        ctx = rule.torch_context
        allowed = own | derived | every_rule | rule.snippet_names | names.ATTRIBUTE_NAMES
        allowed |= set(rule.own_names.values())
        statics = {i.name for i in rule.inputs if i.static}
        for backend in ("jax", "torch"):
            tree = ast.parse((out / backend / f"{rule.name}.py").read_text())
            strange = {n for n in _identifiers(tree) - allowed if not names.TEMPORARY.fullmatch(n)}
            kept = {names.ctx_attribute(s) for s in statics}
            strange |= _ctx_attributes(tree, ctx) - names.CTX_ATTRIBUTES - kept - derived
            if strange:
                unexplained[f"{backend}/{rule.name}"] = strange
    assert not unexplained, f"names generated code uses that rulegen.spec.names does not reserve: {unexplained}"


def _build_text(tmp_path: Path, text: str):
    (tmp_path / "rules").mkdir(exist_ok=True)
    (tmp_path / "rules" / "bad.yaml").write_text(text)
    out = tmp_path / "pkg"
    result = CliRunner().invoke(app, ["build", str(tmp_path / "rules"), "--out", str(out)], catch_exceptions=False)
    return result, out


def _rule(name: str = "f", inputs: str = "[x]", forward: str = "x", extra: str = "") -> str:
    return f"name: {name}\ninputs: {inputs}\nforward: {forward}\n{extra}"


# (case, rule text, "line:col" of the error, message fragment)
REFUSED = [
    *(
        (f"input-{n}", _rule(inputs=f"[x, {n}]", forward=f"x * {n}"), "2:13", "key of the rule format")
        for n in ("torch", "jax", "sympy", "rng")
    ),
    (
        "output-hides-a-module-the-body-reads",
        _rule(forward="{python: 'return xp.sin(x)'}", extra="outputs: [xp]\nvjp: {python: 'return xp_bar * x'}\n"),
        "3:20",
        "reads the module 'xp'",
    ),
    ("input-underscore", _rule(inputs="[x, _y]", forward="x * _y"), "2:13", "starts with `_`"),
    ("input-is-the-rule", _rule(inputs="[x, f]", forward="x * f"), "2:13", "own function or class name"),
    ("output-is-the-class", _rule(name="sin_mul", extra="outputs: [SinMul]\n"), "4:11", "own function or class"),
    ("input-tangent-of-another", _rule(inputs="[x, x_dot]", forward="x * x_dot"), "2:13", "derives from 'x'"),
    (
        "residual-named-like-a-helper",
        _rule(forward="{python: 'return x, x'}", extra="residuals: [f_rule]\njvp: {python: 'return x_dot'}\n"),
        "1:1",
        "'f_rule'",
    ),
    *(
        (f"rule-name-{n}", _rule(name=n), "1:7", "")
        for n in ("_inplace", "_bridge", "__init__", "_", "none", "true", "jax", "xp", "math")
    ),
    ("class-name-none", _rule(extra="class_name: None\n"), "4:13", "keyword"),
]


@pytest.mark.parametrize(("case", "text", "where", "fragment"), REFUSED, ids=[c[0] for c in REFUSED])
def test_a_name_generated_code_uses_is_refused_where_it_is(tmp_path, monkeypatch, case, text, where, fragment):
    monkeypatch.chdir(tmp_path)
    result, out = _build_text(tmp_path, text)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    match = re.search(r"bad\.yaml:(\d+):(\d+): error: (.*)", result.output)
    assert match, result.output
    assert f"{match.group(1)}:{match.group(2)}".startswith(where), result.output
    assert fragment in result.output, result.output
    assert not out.exists()


@pytest.mark.parametrize(
    ("first", "second", "clash"),
    [
        ("name: sin_mul\ninputs: [x]\nforward: x\n", "name: sin__mul\ninputs: [x]\nforward: x\n", "'SinMul'"),
        ("name: f_1\ninputs: [x]\nforward: x\n", "name: f1\ninputs: [x]\nforward: x\n", "'F1'"),
        ("name: a\ninputs: [x]\nforward: x\n", "name: b\nclass_name: A\ninputs: [x]\nforward: x\n", "'A'"),
        ("name: a\ninputs: [x]\nforward: x\n", "name: a\ninputs: [y]\nforward: y\n", "already defined"),
    ],
    ids=["camel-case", "digits", "class-name", "function-name"],
)
@pytest.mark.parametrize("incremental", [False, True], ids=["fresh", "first-file-reused"])
def test_two_rules_with_one_exported_name_are_refused_with_both_places(
    tmp_path, monkeypatch, first, second, clash, incremental
):
    monkeypatch.chdir(tmp_path)
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "a.yaml").write_text(first)
    out = tmp_path / "pkg"
    if incremental:
        assert CliRunner().invoke(app, ["build", "rules", "--out", str(out)]).exit_code == 0
    (rules / "b.yaml").write_text(second)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} if incremental else {}
    result = CliRunner().invoke(app, ["build", "rules", "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert clash in result.output
    assert "rules/b.yaml:1:" in result.output and "rules/a.yaml:1:" in result.output, result.output
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    test = CliRunner().invoke(app, ["test", "rules"], catch_exceptions=False)
    assert test.exit_code == 2 and clash in test.output, test.output


@pytest.mark.parametrize("command", ["build", "test"])
def test_a_file_named_twice_is_one_file_not_a_rule_defined_twice(tmp_path, monkeypatch, command):
    """`rulegen build rules/a.yaml rules/` refused a's rule as 'already defined at rules/a.yaml:1:1', itself."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "a.yaml").write_text("name: a\ninputs: [x]\nforward: 2 * x\n")
    given = ["rules/a.yaml", "rules", str(tmp_path / "rules" / "a.yaml"), "rules/../rules/a.yaml"]
    extra = ["--out", str(tmp_path / "pkg")] if command == "build" else ["-j", "1", "--json"]
    result = CliRunner().invoke(app, [command, *given, *extra], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "already defined" not in result.output


COMPLEX = "name: c_tanh_exp\ninputs:\n  z: {dtype: complex}\nforward: tanh(exp(z))\n"
RETURNS = "name: r\ninputs:\n  x: {}\n  s: {static: true, default: 1.0}\nreturns: {a: a}\nforward: {a: x * s}\n"


@pytest.mark.parametrize("text", [COMPLEX, RETURNS], ids=["complex", "returns-and-default"])
def test_a_rule_defined_in_two_files_is_refused_naming_both_places(tmp_path, monkeypatch, text):
    """A complex rule defined twice was 'already defined at <unknown>:1:1', at <unknown>:1:1."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "a.yaml").write_text(text)
    (tmp_path / "rules" / "b.yaml").write_text("# the same rule again\n" + text)
    result = CliRunner().invoke(app, ["build", "rules", "--out", str(tmp_path / "pkg")], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert re.search(r"rules/b\.yaml:2:1: error: rule '\w+' is already defined at rules/a\.yaml:1:1", result.output)
    assert "<unknown>" not in result.output


def test_test_of_one_file_resolves_rules_of_other_files_and_reports_only_its_own(project):
    result = CliRunner().invoke(app, ["test", "rules/quartered.yaml", "--json", "-j", "1"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    import json

    outcomes = json.loads(result.output)
    assert {o["rule"] for o in outcomes} == {"quartered"}, outcomes


def test_pytest_of_one_file_resolves_rules_of_other_files(project):
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "rules/quartered.yaml"],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"\b[1-9]\d* passed", proc.stdout), proc.stdout


def test_a_static_named_self_reaches_a_host_rule(tmp_path):
    """Statics pass to the JAX primitive of a `numpy:` rule by keyword: no name of theirs may meet its own."""
    import subprocess
    import sys

    text = (
        "name: host_scaled\ninputs:\n  x: {}\n  self: {static: true, default: 2.0}\n"
        "forward:\n  numpy: return x * self\njvp:\n  python: return x_dot * self\n"
    )
    (tmp_path / "host_scaled.yaml").write_text(text)
    build([tmp_path / "host_scaled.yaml"], tmp_path / "pkg")
    code = (
        "import jax, jax.numpy as jnp, pkg.jax as J\n"
        "print(float(J.host_scaled(jnp.float32(1.0))), float(jax.grad(J.host_scaled)(jnp.float32(1.0), 3.0)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["2.0", "3.0"]


def _generators_own_names() -> list[str]:
    """Every name generated code gives its own things, as a rule may spell it, that a rule may now take.

    Its private names without their underscore (`_low` -> `low`, `_host_op`),
    the attributes of torch's Function context (where statics are kept),
    the locals it renames where a rule takes their name (`ctx`), and the
    modules, helpers and builtins its modules read (`torch`, `plain`, `max`).
    Those still reserved (`names.RESERVED`: the rule format's keys) are refused
    where they are written (above).
    """
    private = {p.strip("_") for p in names.PRIVATE_NAMES if p.strip("_") and not p.startswith("__")}
    taken = (private | names.CTX_ATTRIBUTES | names.OWN_LOCALS | names.GLOBAL_NAMES | {"high"}) - names.RESERVED
    return sorted(n for n in taken if n.isidentifier() and n not in ("f", "x"))


#: The modules the hygiene rules' Python and NumPy bodies read: a static of that name would be what the body
#: reads (the rule's own choice), so these names are taken by the rules without bodies only.
_MODULES_THE_BODIES_READ = frozenset({"xp", "np"})
_BODY_KINDS = ("snip", "back", "host")


def _hygiene_rules(taken: list[str]) -> str:
    """Rules named each name, and whose array input, static input, output, and snippet and host bodies' statics
    take it."""
    rules = []
    for n in taken:
        rules += [
            f"  - name: arr_{n.lower()}\n    inputs: [x, {n}]\n    forward: x * {n} + sin({n})\n",
            f"  - name: sta_{n.lower()}\n    inputs:\n      x: {{}}\n      {n}: {{static: true, default: 2.0}}\n"
            f"    forward: x * {n} + sin(x)\n",
            f"  - name: res_{n.lower()}\n    inputs: [x]\n    outputs: [{n}]\n    forward: {{{n}: x * sin(x)}}\n",
        ]
        if n not in _MODULES_THE_BODIES_READ:
            rules += [
                f"  - name: snip_{n.lower()}\n    inputs:\n      x: {{}}\n      {n}: {{static: true, default: 2.0}}\n"
                f"    forward:\n      python: return x * {n} + xp.sin(x)\n"
                f"    jvp:\n      python: return x_dot * ({n} + xp.cos(x))\n",
                f"  - name: back_{n.lower()}\n    inputs:\n      x: {{}}\n      {n}: {{static: true, default: 2.0}}\n"
                f"    forward:\n      python: return x * {n} + xp.sin(x)\n"
                f"    vjp:\n      python: return out_bar * ({n} + xp.cos(x))\n",
                f"  - name: host_{n.lower()}\n    inputs:\n      x: {{}}\n      {n}: {{static: true, default: 2.0}}\n"
                f"    forward:\n      numpy: return x * {n} + np.sin(x)\n    batching: elementwise\n"
                f"    jvp:\n      python: return x_dot * ({n} + xp.cos(x))\n",
            ]
        # A rule named like a local, module or helper: the generator's private functions `_{rule}`
        # still take the names of its flag `_low` and the like, so not those here.
        if _rule_named(n):
            rules.append(f"  - name: {n}\n    inputs: [x]\n    forward: x * sin(x)\n")
    return "rules:\n" + "".join(rules)


def _rule_named(n: str) -> bool:
    """Whether a hygiene rule is named `n` itself: a snake_case local, module, helper or builtin of generated code."""
    usable = n.islower() and f"_{n}" not in names.PRIVATE_NAMES and n not in names.MODULE_NAMES
    return usable and (n in names.OWN_LOCALS or n in names.GLOBAL_NAMES)


def _calls_agree(jax_pkg, torch_pkg, n: str) -> list[str]:
    """What differs from the exact values and gradients when each rule of `_hygiene_rules` is called."""
    import math

    import jax
    import torch

    x = 0.7
    exact = {  # value and gradient in x, the other argument 2.0 (1.3 for the array one)
        "arr": (x * 1.3 + math.sin(1.3), 1.3),
        "sta": (2 * x + math.sin(x), 2 + math.cos(x)),
        "res": (x * math.sin(x), math.sin(x) + x * math.cos(x)),
        "": (x * math.sin(x), math.sin(x) + x * math.cos(x)),
        "snip": (2 * x + math.sin(x), 2 + math.cos(x)),
        "host": (2 * x + math.sin(x), 2 + math.cos(x)),
        "back": (2 * x + math.sin(x), 2 + math.cos(x)),
    }
    wrong = []
    for kind, (value, grad) in exact.items():
        if (not kind and not _rule_named(n)) or (kind in _BODY_KINDS and n in _MODULES_THE_BODIES_READ):
            continue
        name = f"{kind}_{n.lower()}" if kind else n
        other = {"arr": {n: 1.3}, "res": {}, "": {}}.get(kind, {n: 2.0})
        f_jax, f_torch = getattr(jax_pkg, name), getattr(torch_pkg, name)
        got = [float(f_jax(x, **other)), float(jax.grad(lambda t, f=f_jax, o=other: f(t, **o))(x))]
        t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        out = f_torch(t, **{k: torch.tensor(v, dtype=torch.float64) if kind == "arr" else v for k, v in other.items()})
        out.backward()
        forward_mode = torch.func.jacfwd(lambda u, f=f_torch, o=other: f(u, **o))(torch.tensor(x, dtype=torch.float64))
        got += [out.item(), t.grad.item(), forward_mode.item()]
        want = [value, grad, value, grad, grad]
        if not all(abs(g - w) < 1e-12 for g, w in zip(got, want, strict=True)):
            wrong.append(f"{name}: {got} != {want}")
    return wrong


@pytest.mark.parametrize(
    "taken",
    [
        pytest.param(
            [
                *("low", "high", "ctx", "primals", "tangents", "saved", "cotangents", "function", "name"),
                *("inputs", "output", "info", "in_dims"),
                *("min", "max", "float", "math", "jnp", "plain", "as_tensors", "rounded", "staticmethod"),
            ],
            id="a-few",
        ),
        # Costly: a build of every name the generator gives its own, minutes under load (handed out first).
        pytest.param(_generators_own_names(), id="every", marks=[pytest.mark.slow, pytest.mark.costly]),
    ],
)
def test_a_rule_takes_the_names_the_generator_gives_its_own_things(tmp_path, monkeypatch, taken):
    """An input `low` was refused ('gives generated code the name _low'), a static `name` (torch's ctx.name)."""
    import importlib
    import sys

    (tmp_path / "taken.yaml").write_text(_hygiene_rules(taken))
    build([tmp_path / "taken.yaml"], tmp_path / "rg_taken", jobs=2)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        jax_pkg, torch_pkg = importlib.import_module("rg_taken.jax"), importlib.import_module("rg_taken.torch")
        wrong = [w for n in taken for w in _calls_agree(jax_pkg, torch_pkg, n)]
    finally:
        for module in [m for m in sys.modules if m.startswith("rg_taken")]:
            del sys.modules[module]
    assert not wrong, "\n".join(wrong)


def test_a_structure_or_named_tuple_may_take_a_local_generated_code_names_for_itself(tmp_path, monkeypatch):
    """The torch public function's `function` local beside a structured argument or a result class `function`."""
    import importlib

    import jax
    import torch

    (tmp_path / "s.yaml").write_text(
        "name: s_struct\ninputs:\n  function: {fields: [x, y]}\nreturns: {namedtuple: ctx, fields: [a]}\n"
        "outputs: [a]\nforward: {a: x * sin(y)}\n"
    )
    build([tmp_path / "s.yaml"], tmp_path / "rg_struct")
    monkeypatch.syspath_prepend(str(tmp_path))
    jax_pkg, torch_pkg = importlib.import_module("rg_struct.jax"), importlib.import_module("rg_struct.torch")
    point = collections.namedtuple("P", "x y")
    assert float(jax_pkg.s_struct(point(2.0, 0.5)).a) == pytest.approx(2 * math.sin(0.5), rel=1e-15)
    grads = jax.grad(lambda p: jax_pkg.s_struct(p).a)(point(2.0, 0.5))
    assert float(grads.x) == pytest.approx(math.sin(0.5), rel=1e-15)
    x = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    out = torch_pkg.s_struct(point(x, torch.tensor(0.5, dtype=torch.float64)))
    assert type(out).__name__ == "ctx"
    out.a.backward()
    assert x.grad.item() == pytest.approx(math.sin(0.5), rel=1e-15)


CLAMP = """\
name: clamp
doc: ChainRules.jl's clamp(x, low, high).
inputs:
  x: {}
  low: {static: true, default: -1.0}
  high: {static: true, default: 1.0}
forward: Min(Max(x, low), high)
"""


def test_chainrules_clamp_with_low_and_high_builds_and_differentiates(tmp_path, monkeypatch):
    import importlib

    import jax
    import torch

    (tmp_path / "clamp.yaml").write_text(CLAMP)
    build([tmp_path / "clamp.yaml"], tmp_path / "rg_clamp")
    monkeypatch.syspath_prepend(str(tmp_path))
    jax_pkg, torch_pkg = importlib.import_module("rg_clamp.jax"), importlib.import_module("rg_clamp.torch")
    points = [(-2.0, 0.0), (0.5, 1.0), (3.0, 0.0)]
    for x, slope in points:
        assert float(jax_pkg.clamp(x, low=-1.0, high=1.0)) == min(max(x, -1.0), 1.0)
        assert float(jax.grad(jax_pkg.clamp)(x, -1.0, 1.0)) == slope
        t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        torch_pkg.clamp(t, low=-1.0, high=1.0).backward()
        assert t.grad.item() == slope
