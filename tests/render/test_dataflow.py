"""What the build knows about generated modules comes from the plans, never from their text.

Which helpers the package ships, what a distribution requires, which rules
export a Function class and which tensors a method saves are read off typed
plan data (import statements the planner chose, Block.reads); an internal
failure inside a stage names the rule and the stage.
"""

from __future__ import annotations

import ast
import pathlib
import re
from collections.abc import Iterator

import pytest

from rulegen.render.build import generate
from rulegen.spec.errors import SpecErrors
from rulegen.spec.rules import read_rule_file
from tests.sources import walked

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "rulegen"

# A host body that imports a module itself: the distribution must require it,
# though no module-level import of the generated code names it.
HOST_IMPORT = """\
name: erfcx_host
inputs: [x]
forward:
  numpy: |
    import scipy.special
    return scipy.special.erfcx(x)
jvp:
  python: return (2 * x * out - 2 / math.sqrt(math.pi)) * x_dot
batching: elementwise
"""

PLAIN = """\
name: twice
inputs: [x]
forward:
  python: return 2 * x
"""

# A custom_vjp whose bwd reads `y` only through fixed code (zeros for an input not differentiated).
FIXED_READ = """\
name: scaled
mode: vjp
inputs:
  x: {}
  y: {diff: false}
forward: 3 * x
"""


def _rule(tmp_path: pathlib.Path, name: str, text: str):
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path, read_rule_file(path, path.name)[0]


def test_every_module_a_plan_names_as_a_helper_is_one_its_text_imports(tmp_path):
    # The plan's account against the rendered text, from outside the compiler.
    for name, text in {"erfcx_host": HOST_IMPORT, "twice": PLAIN, "scaled": FIXED_READ}.items():
        _, rule = _rule(tmp_path, name, text)
        generated = generate(rule)
        from_text = set()
        for rel, module in generated.modules.items():
            backend = rel.split("/")[0]
            for node in ast.walk(ast.parse(module)):
                if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module.startswith("_"):
                    from_text.add(f"{backend}/{node.module}.py")
        assert generated.helpers == from_text, name


def test_a_value_read_only_by_fixed_code_is_saved(tmp_path):
    from rulegen.derive.partials import derive_rule
    from rulegen.plan import plan_jax

    _, rule = _rule(tmp_path, "scaled", FIXED_READ)
    plan = plan_jax(derive_rule(rule))
    assert plan.bwd is not None and "y" in plan.bwd.reads
    assert "y" in plan.saved


def _compiler_modules(but: str) -> Iterator[tuple[str, tuple[ast.AST, ...]]]:
    """(path relative to the package, every node of the parsed module) of every compiler module but the runtime it
    ships and `but`, parsed once per process (tests/sources.py)."""
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if not rel.startswith("runtime/") and rel != but:
            yield rel, walked(path)


def _string_text(node: ast.AST) -> str | None:
    """The text of a string or f-string (each formatted value as the name `x`); None for any other node."""
    if isinstance(node, ast.JoinedStr):
        return "".join(str(v.value) if isinstance(v, ast.Constant) else "x" for v in node.values)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def test_imports_are_data_and_printed_in_one_place():
    """A generated module's imports are `rulegen.plan.code.Import`s, printed by `code.import_statements` and read by
    `needs_of` off their fields: no stage writes an import statement as text, or parses one back."""
    found = set()
    for rel, nodes in _compiler_modules(but="plan/code.py"):
        for node in nodes:
            text = _string_text(node)
            if text is None:
                continue
            if re.match(r"(import [\w.]+|from [\w.]+ import \w)", text):
                found.add((rel, text[: len("from ..torch.")]))
    assert not found


#: What a Python statement looks like as text: a keyword that opens one, a decorator, or an assignment (` = `
#: before any bracket; a keyword argument, `beta=beta`, has no spaces).
_STATEMENT = re.compile(
    r"^\s*(return\b|raise\b|pass$|def |class |import |from \S+ import |@\w|(if|elif|else|for|while|with|try)\b.*:$)"
    r"|^[^=(\[{'\"]*[^=!<>:+\-*/%&|^ ] = ",
    re.M,
)


def _docstrings(nodes: tuple[ast.AST, ...]) -> set[int]:
    bodies = [n for n in nodes if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef)]
    return {id(b.body[0].value) for b in bodies if b.body and isinstance(b.body[0], ast.Expr)}


#: Functions and constants whose strings look like statements and are not: prose of a generated docstring
#: (formulas, `y = f(x)`), a parameter of a signature (`x: float = 1.0`), ruff's configuration (TOML).
NOT_STATEMENTS = {
    ("plan/header.py", "help_text"),
    ("plan/header.py", "_chosen"),
    ("plan/header.py", "stability_notes"),
    ("plan/model.py", "__str__"),
    ("render/write.py", "RUFF_ARGS"),
}

#: The stages that write the generated package (the checks write programs of their own to run, not to ship).
_WRITING_STAGES = ("spec", "derive", "plan", "render")


def _defined(node: ast.AST) -> str | None:
    """The name a function definition or a module constant's assignment defines."""
    if isinstance(node, ast.FunctionDef):
        return node.name
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    return None


def test_no_stage_writes_a_statement_as_text():
    """Generated statements are `rulegen.plan.code` statements (`Assign`, `Return`, `If`, `Def` ...), which its printer
    alone writes: no string or f-string of the stages that write the package is a statement, and the module
    template is layout."""
    found = []
    for rel, nodes in _compiler_modules(but="plan/code.py"):
        if rel.split("/")[0] not in _WRITING_STAGES:
            continue
        docstrings = _docstrings(nodes)
        exempt = {id(node) for owner in nodes if (rel, _defined(owner)) in NOT_STATEMENTS for node in ast.walk(owner)}
        for node in nodes:
            text = None if id(node) in docstrings else _string_text(node)
            if text is None:
                continue
            # A rule's snippet is parsed wrapped in a function (symbols, snippet): read, not written.
            if id(node) not in exempt and _STATEMENT.search(text) and "def _body():" not in text:
                found.append((rel, node.lineno, text[:60]))
    assert found == []
    for template in (PACKAGE.parent / "templates").glob("*.py.j2"):
        lines = [line for line in template.read_text().splitlines() if line and not line.startswith(("{%", "{#", "#"))]
        assert all(re.fullmatch(r"\{\{[^{}]*\}\}", line) for line in lines), (template.name, lines)


def test_tangent_and_cotangent_names_are_spelled_by_names_py_alone():
    """`x_dot` and `out_bar` come from `names.tangent` and `names.cotangent`: no stage appends the suffix itself."""
    from rulegen.spec.names import COTANGENT, TANGENT

    found = []
    for rel, nodes in _compiler_modules(but="spec/names.py"):
        for node in nodes:
            if isinstance(node, ast.Constant) and node.value in (TANGENT, COTANGENT):
                found.append((rel, node.lineno))
            if isinstance(node, ast.JoinedStr):
                for before, after in zip(node.values, node.values[1:], strict=False):
                    text = after.value if isinstance(after, ast.Constant) else None
                    if isinstance(before, ast.FormattedValue) and str(text).startswith((TANGENT, COTANGENT)):
                        found.append((rel, node.lineno))
    assert found == []


def test_names_generated_from_a_rule_s_names_are_spelled_by_names_py_alone():
    """`_f`, `_apply_f`, `_f_jvp`, `_f_fwd`, `_x_dot`, `ctx.x_shape` ... come from `rulegen.spec.names`' functions
    (`hidden`, `applier`, `vjp_halves`, `shape_attribute` ...), which also declare them reserved: no planner
    writes the pattern around a name itself."""
    suffixes = ("_fwd", "_bwd", "_jvp", "_rule", "_map", "_shape")
    found = []
    for rel, nodes in _compiler_modules(but="spec/names.py"):
        for node in nodes:
            if not isinstance(node, ast.JoinedStr):
                continue
            parts = node.values
            for k, part in enumerate(parts):
                text = part.value if isinstance(part, ast.Constant) else None
                after_name = k > 0 and isinstance(parts[k - 1], ast.FormattedValue)
                before_name = k + 1 < len(parts) and isinstance(parts[k + 1], ast.FormattedValue)
                if not isinstance(text, str):
                    continue
                if (after_name and text.startswith(suffixes)) or (
                    before_name
                    and (text.endswith(("_apply_", "_torch_", "(_", " _", ", _")) or (k == 0 and text == "_"))
                ):
                    found.append((rel, node.lineno, text))
    assert found == []


#: What parses Python source: calls, and modules whose import is enough to say so.
_PARSERS = {"ast.parse", "ast.literal_eval", "compile", "eval", "exec", "tokenize.tokenize", "tokenize.generate_tokens"}
_PARSING_MODULES = {"re", "tokenize"}


def test_no_planner_reads_back_the_code_it_printed():
    """The planners, printers and in-place writer decide on sympy expressions and typed data, not on the text they
    printed: no regular expression over code, nothing that parses it (how tightly printed code binds is the
    `Value` its printer gives), and `ast.parse` only of a rule's own snippet bodies."""
    found = set()
    for path in (PACKAGE / "plan").glob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        for node in walked(path):
            if isinstance(node, ast.Import):
                assert not {a.name for a in node.names} & _PARSING_MODULES, rel
            if isinstance(node, ast.ImportFrom):
                assert node.module not in _PARSING_MODULES, rel
        for function in (n for n in walked(path) if isinstance(n, ast.FunctionDef)):
            for node in ast.walk(function):
                if isinstance(node, ast.Call) and ast.unparse(node.func) in _PARSERS:
                    found.add((rel, function.name))
    # A snippet body is the rule's text, parsed to split it into statements and to read its expression's binding.
    assert found == {("plan/snippet.py", "inline_expression")}


ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


def test_the_layout_the_readme_gives_is_the_package_s():
    """The README's stage table has one row per stage of rulegen.STAGES, in order, naming its folder and modules."""
    import re

    from rulegen import STAGES

    text = (PACKAGE.parent / "README.md").read_text()
    layout = text[text.index("## Layout") : text.index("## Documentation")]
    named = set(re.findall(r"`(rulegen/[\w/.]*|templates/)`", layout))
    assert all((PACKAGE.parent / path).exists() for path in named), named
    rows = [line for line in layout.splitlines() if line.startswith("| ") and "rulegen/" in line]
    in_rows = []
    for row in rows:
        folder = re.search(r"`rulegen/(\w+)/`:", row)
        if folder:
            in_rows.append((folder[1], re.findall(r"`([\w.]+)`", row[folder.end() :])))
        else:
            in_rows.append(("", [m.removesuffix(".py") for m in re.findall(r"`rulegen/(\w+\.py)`", row)]))
    assert in_rows == [(folder, list(modules)) for folder, _, modules in STAGES]


def test_the_layout_the_docs_give_is_the_package_s():

    text = ARCHITECTURE.read_text()
    named = set(re.findall(r"`(rulegen/[\w/]+\.py)`", text))
    modules = {
        p.relative_to(PACKAGE.parent).as_posix()
        for p in PACKAGE.rglob("*.py")
        if p.name != "__init__.py" and "runtime" not in p.relative_to(PACKAGE).parts
    }
    assert modules - named == set(), "modules the layout does not name"
    assert named - modules - {p for p in named if p.startswith("rulegen/runtime/")} == set(), "named, but absent"


AUX_BAR = """\
name: two
inputs: [x]
outputs:
  out: {{}}
  aux: {{diff: false}}
forward:
  out: x * 2
  aux: x * 3
vjp: {body}
"""


@pytest.mark.parametrize("body", ["2 * out_bar + aux_bar", "\n  python: return 2 * out_bar + aux_bar"])
def test_symbolic_and_snippet_bodies_see_the_same_names(tmp_path, body):
    # A cotangent of an output that is not differentiated is in no body's scope (rulegen.derive.symbols.scope).
    path = tmp_path / "two.yaml"
    path.write_text(AUX_BAR.format(body=body))
    (rule,) = read_rule_file(path, "two.yaml")
    with pytest.raises(SpecErrors) as caught:
        generate(rule)
    (error,) = caught.value.errors
    assert "unknown name 'aux_bar'" in str(error) and error.loc.line >= 9


FLAT = "name: r\ninputs: [x]\nforward: x * x\nderivatives:\n  x: 2 * x\n"
NESTED = "name: r\ninputs: [x]\nforward: x * x\nderivatives:\n  out:\n    x: 2 * x\n"


def test_the_format_s_unions_reach_later_stages_in_one_form(tmp_path):
    forms = []
    for text in (FLAT, NESTED):
        path = tmp_path / "r.yaml"
        path.write_text(text)
        (rule,) = read_rule_file(path, "r.yaml")
        assert set(rule.partials) == {"out"} and set(rule.partials["out"]) == {"x"}
        # Past the header, which names the file's hash.
        forms.append({rel: text.split("\n", 2)[2] for rel, text in generate(rule).modules.items()})
    assert forms[0] == forms[1]


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        (
            "name: r\ninputs: [x]\noutputs: [a, b]\nforward:\n  a: x\n  b: 2 * x\nderivatives:\n  x: 1\n",
            8,
            "with several outputs, `derivatives` maps each output to {input: partial}",
        ),
        ("name: r\ninputs: [x]\nforward: x * x\nresiduals: [r]\n", 1, "residuals returned by the forward body"),
    ],
)
def test_a_form_that_cannot_be_normalised_is_refused_when_read(tmp_path, text, line, message):
    path = tmp_path / "r.yaml"
    path.write_text(text)
    with pytest.raises(SpecErrors) as caught:
        read_rule_file(path, "r.yaml")
    assert any(message in str(e) and e.loc.line == line for e in caught.value.errors), caught.value.errors
