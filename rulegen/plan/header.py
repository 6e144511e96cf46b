"""What every generated module begins with: docstrings, the public signature, argument conversion."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable, Mapping, Sequence

import sympy as sp

from rulegen.derive.partials import Derivation
from rulegen.derive.snippet import SnippetDerivation
from rulegen.plan.code import (
    DOC_WIDTH,
    Assign,
    Class,
    Docstring,
    Expr,
    Field,
    Import,
    Return,
    Statement,
    docstring,
    imported,
    spelled,
)
from rulegen.plan.model import Header, Param
from rulegen.spec.rules import (
    ASSUMPTION_CONDITIONS,
    Input,
    Returned,
    Rule,
    SnippetBody,
    Structured,
    StructureKind,
)


def array_arguments(rule: Rule, helper: str, *, lifted: bool = False) -> tuple[Assign, ...]:
    """The public function's array arguments through the backend's `helper`, if any (after `static_check`).

    `lifted`: the helper also returns the dtype its float arrays were lifted
    from (torch's `as_opmath_tensors`), unpacked as `_low`.

    The helpers (torch/_util.as_tensors, jax/_util.as_arrays) take what users pass
    where JAX takes it: Python numbers and lists (torch's `apply` would hand
    them on as numbers), integer arrays for float inputs (a host body would
    return its float results truncated to integers); and they refuse complex
    arrays, which no rule supports yet.  JAX runs its helper when it traces
    the body, at no cost to the computation.
    """
    arrays = [i for i in rule.inputs if not i.static]
    if not arrays:
        return ()
    names = ", ".join(i.name for i in arrays)
    targets = f"{names}," if len(arrays) == 1 else names
    if lifted:
        targets = f"({targets}), _low"
    quoted = ", ".join(repr(i.name) for i in arrays) + ("," if len(arrays) == 1 else "")
    kinds = "".join(_DTYPE_LETTERS[i.dtype] for i in arrays)
    return (Assign(targets, f"{rule.own_names[helper]}({rule.name!r}, ({quoted}), {kinds!r}, {names})"),)


def static_check(rule: Rule, called: Iterable[str] = ()) -> tuple[Expr, ...]:
    """The public function's first statement where the rule has statics: `check_statics` of them, which
    refuses a traced or differentiated value.

    JAX would hand a traced static to the rule as a constant and torch would
    return no gradient for it: a silent zero.  Its letter tells the message
    whether `static: false` would make the input differentiable (`n`) or not
    (`v`).  torch leaves out the statics its bodies call (`called`:
    fixed_point's `f`), where a tensor fails at the call; a JAX callable may
    be a pytree holding tracers (`jax.tree_util.Partial`), so JAX checks them.
    """
    statics = [i for i in rule.inputs if i.static and i.name not in set(called)]
    if not statics:
        return ()
    names = ", ".join(i.name for i in statics)
    quoted = ", ".join(repr(i.name) for i in statics) + ("," if len(statics) == 1 else "")
    kinds = "".join("n" if _differentiable_as_array(rule, i) else "v" for i in statics)
    return (Expr(f"{rule.own_names['check_statics']}({rule.name!r}, ({quoted}), {kinds!r}, {names})"),)


def _snippets(rule: Rule) -> list[SnippetBody]:
    residuals = rule.residuals.values() if isinstance(rule.residuals, dict) else ()
    return [b for b in (rule.forward, rule.jvp, rule.vjp, *residuals) if isinstance(b, SnippetBody)]


def _differentiable_as_array(rule: Rule, static: Input) -> bool:
    """Whether `static: false` makes `static` an input the rule differentiates: a float number read by
    symbolic bodies alone, whose derivatives sympy derives."""
    default = static.default
    number = not static.has_default or (isinstance(default, int | float) and not isinstance(default, bool))
    return static.dtype == "float" and number and not _snippets(rule)


def jax_util_imports(imports: set[Import], rule: Rule, *, lift: bool = True) -> frozenset[Import]:
    """A JAX module's imports, with what it takes from jax/_util.py for its arguments, spelled as the module spells
    its own names (`Rule.own_names`); `lift`: the public function lifts float arrays (`jax_array_helper`)."""
    util = [jax_array_helper(rule) if lift else "as_arrays"] if any(not i.static for i in rule.inputs) else []
    util += ["check_statics"] if static_check(rule) else []
    return spelled(imports | imported("._util", *util, *unpack_helpers(rule)), rule.own_names)


#: The import of the rounding back of results computed in float32 (bfloat16 and float16 arrays).
LIFT_IMPORT = imported("._util", "rounded")


def jax_lifted(rule: Rule) -> bool:
    """Whether a JAX public function lifts float arrays to float32 (where bfloat16 or float16) and rounds back."""
    return any(not i.static and i.dtype == "float" for i in rule.inputs)


def jax_array_helper(rule: Rule) -> str:
    """The jax/_util.py helper taking a rule's array arguments: `as_lifted_arrays` where it has float ones, which
    lifts them to float32 as well (`jax_lifted`), else `as_arrays`."""
    return "as_lifted_arrays" if jax_lifted(rule) else "as_arrays"


def jax_array_arguments(rule: Rule) -> tuple[Assign, ...]:
    """A JAX public function's array arguments as the rule reads them, float ones lifted (`jax_array_helper`)."""
    return array_arguments(rule, jax_array_helper(rule), lifted=jax_lifted(rule))


#: The import of the sum of a cotangent back to a broadcast input's shape.
SUM_TO_SHAPE_IMPORT = frozenset({Import("._util", "sum_to_shape", "_sum_to_shape")})


_DTYPE_LETTERS = {"float": "f", "complex": "c", "int": "i", "bool": "b"}


def torch_util_imports(
    imports: set[Import], names: Sequence[str], function_names: Sequence[str], own: Mapping[str, str]
) -> frozenset[Import]:
    """A torch module's imports, with what it takes from torch/_util.py and _function.py."""
    return spelled(imports | imported("._util", *names) | imported("._function", *function_names), own)


def array_types(backend: str, own: Mapping[str, str]) -> tuple[dict[str, str], str]:
    """The annotation of an array argument (by input dtype) and of a result, as the module spells them."""
    if backend == "jax":
        jax = own["jax"]
        return dict.fromkeys(("float", "complex", "int", "bool"), f"{jax}.typing.ArrayLike"), f"{jax}.Array"
    tensor = f"{own['torch']}.Tensor"
    return {dtype: f"{tensor} | {own[dtype]}" for dtype in ("float", "complex", "int", "bool")}, tensor


def parameters_of(rule: Rule, backend: str) -> tuple[Param, ...]:
    """The public function's parameters: the inputs, a structure standing for its arrays; array arguments
    annotated (statics may be any hashable value)."""
    own = rule.own_names
    arguments, _ = array_types(backend, own)
    found: list[Param] = []
    for p in rule.parameters:
        if not isinstance(p, Structured):
            default = python_literal(p.default, own["float"]) if p.has_default else None
            found.append(Param(p.name, default, None if p.static else arguments[p.dtype]))
        elif p.kind == "keys":
            annotation = f"{own['dict']}[{own['str']}, {_union(arguments[i.dtype] for i in p.leaves)}]"
            found.append(Param(p.name, None, annotation))
        elif p.kind == "items":
            found.append(Param(p.name, None, f"{own['tuple']}[{', '.join(arguments[i.dtype] for i in p.leaves)}]"))
        else:
            # Any object with these attributes will do (a named tuple is one): no one class to name.
            found.append(Param(p.name))
    return tuple(found)


def unpacked(rule: Rule) -> tuple[Assign, ...]:
    """The public function's first lines: each structured argument taken apart into the arrays the rule reads.

    Through the runtime's `unpack_keys`, `unpack_fields` and `unpack_tuple`
    (`_util.py` of each backend), which refuse a structure given wrongly (a
    plain tuple for fields, a dict missing a key or holding one more, a tuple
    of another length) with the rule's, the argument's and the fields' names,
    not an AttributeError or KeyError from inside.  Under jit they run when
    tracing, at no cost to the computation.
    """
    lines: list[Assign] = []
    for p in rule.parameters:
        if isinstance(p, Structured):
            leaves = [i.name for i in p.leaves]
            targets = f"{leaves[0]}," if len(leaves) == 1 else ", ".join(leaves)
            names = [i.dict_key for i in p.leaves] if p.kind == "keys" else leaves
            listed = f"({', '.join(map(repr, names))}{',' if len(names) == 1 else ''})"
            helper = rule.own_names[_UNPACKERS[p.kind]]
            lines.append(Assign(targets, f"{helper}({rule.name!r}, {p.name!r}, {p.name}, {listed})"))
    return tuple(lines)


def unpack_helpers(rule: Rule) -> tuple[str, ...]:
    """The runtime helpers `unpacked` calls for `rule`, sorted."""
    return tuple(sorted({_UNPACKERS[p.kind] for p in rule.parameters if isinstance(p, Structured)}))


#: The runtime helper taking a structured argument apart, by the structure's kind.
_UNPACKERS: dict[StructureKind, str] = {"keys": "unpack_keys", "fields": "unpack_fields", "items": "unpack_tuple"}


def public_return(rule: Rule, value: str, *, lifted: bool, spread: bool) -> tuple[Statement, ...]:
    """The public function's last lines: `value` (the flat outputs), rounded where lifted, in the rule's structure.

    `spread`: `value` is one expression evaluating to a tuple of outputs
    (rather than the outputs' names, comma-separated).
    """
    result = f"{rule.own_names['rounded']}(_low, {'*' if spread else ''}{value})" if lifted else value
    if rule.returns is None:
        return (Return(result),)
    outputs = ", ".join(o.name for o in rule.outputs)
    built = Return(_structure_literal(rule.returns))
    return (built,) if result == outputs else (Assign(outputs, result), built)


def _structure_literal(returned: Returned) -> str:
    if returned.kind == "output":
        return returned.name
    items = [_structure_literal(item) for _, item in returned.items]
    if returned.kind == "tuple":
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    if returned.kind == "namedtuple":
        return f"{returned.name}({', '.join(items)})"
    return "{" + ", ".join(f"{key!r}: {item}" for (key, _), item in zip(returned.items, items, strict=True)) + "}"


NAMED_TUPLE_IMPORT = Import("typing", "NamedTuple")


def result_classes(rule: Rule, backend: str) -> tuple[Class, ...]:
    """The module-level classes of the named tuples the public function returns."""
    if rule.returns is None:
        return ()
    own = rule.own_names
    _, result = array_types(backend, own)
    classes = []
    for named in rule.returns.named_tuples:
        what = f"What `{rule.name}` returns" if named is rule.returns else f"Part of what `{rule.name}` returns"
        fields = [Field(field, _structure_type(item, result, own)) for field, item in named.items]
        classes.append(Class(named.name, (own["NamedTuple"],), (Docstring(f"{what}."), *fields)))
    return tuple(classes)


def _union(types: Iterable[str]) -> str:
    return " | ".join(dict.fromkeys(types))


def returns_of(rule: Rule, backend: str) -> str:
    own = rule.own_names
    _, result = array_types(backend, own)
    if rule.returns is not None:
        return _structure_type(rule.returns, result, own)
    count = len(rule.outputs)
    return result if count == 1 else f"{own['tuple']}[{', '.join([result] * count)}]"


def _structure_type(returned: Returned, result: str, own: Mapping[str, str]) -> str:
    if returned.kind == "output":
        return result
    items = [_structure_type(item, result, own) for _, item in returned.items]
    if returned.kind == "tuple":
        return f"{own['tuple']}[{', '.join(items)}]"
    if returned.kind == "namedtuple":
        return returned.name
    return f"{own['dict']}[{own['str']}, {_union(items)}]"


def python_literal(value: object, float_name: str = "float") -> str:
    """`value` (a default: None, a bool, a number, a string or a tuple of these) as Python source.

    `repr` alone gives `inf` and `nan`, which are no Python names; `float_name` spells the builtin.
    """
    if isinstance(value, float) and not math.isfinite(value):
        text = f"{float_name}('nan')" if math.isnan(value) else f"{float_name}('inf')"
        return f"-{text}" if value < 0 else text
    if isinstance(value, tuple):
        items = [python_literal(v, float_name) for v in value]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    if isinstance(value, bool | int | float | str) or value is None:
        return repr(value)
    raise TypeError(f"no Python literal for a default of type {type(value).__name__}")


#: A formula longer than this is cut in the docstring (the rule file has it whole).
FORMULA_CHARS = 300


def _formula(expr: sp.Expr) -> str:
    text = sp.sstr(expr)
    return text if len(text) <= FORMULA_CHARS else text[: FORMULA_CHARS - 3] + "..."


#: What a static input is, by backend: JAX traces a function once per static value, torch runs it as given.
_STATIC_KINDS = {
    "jax": "static (a hashable Python value; JAX recompiles for each)",
    "torch": "static (a Python value, passed to the Function as it is, never differentiated)",
}


def _input_line(i: Input, backend: str) -> str:
    if i.static:
        kind = _STATIC_KINDS[backend]
    else:
        kind = f"{i.dtype} array" + ("" if i.differentiable else ", not differentiated")
    default = f", default {python_literal(i.default)}" if i.has_default else ""
    assumed = f", assumed {' and '.join(i.assume)}" if i.assume else ""
    parts = "real and imaginary parts " if i.dtype == "complex" else ""
    checked = f"; {parts}checked on {i.bounds.describe()}"
    sampled = "" if i.static or i.dtype not in ("float", "complex") else checked
    return f"    {i.name}: {kind}{default}{assumed}{sampled}"


def _assumptions_paragraph(assumed: Sequence[Input]) -> str:
    """What the rule vouches for: sympy simplified with it, so a call outside it gets another function's value."""
    conditions = " and ".join(ASSUMPTION_CONDITIONS[a].format(i.name) for i in assumed for a in i.assume)
    return (
        f"Assumes {conditions}: the formulas were simplified with this, so outside it the result "
        "(value and derivatives) is not this function's, and nothing checks it at call time."
    )


def _structure_line(p: Structured) -> str:
    leaves = [i.name for i in p.leaves]
    what = {
        "fields": f"a named tuple (or any object) with fields {', '.join(leaves)}",
        "keys": "a dict with keys "
        + ", ".join(repr(i.dict_key) + ("" if i.key is None else f" ({i.name})") for i in p.leaves),
        "items": f"a tuple ({', '.join(leaves)})",
    }[p.kind]
    return f"    {p.name}: {what}"


def stability_notes(d: Derivation) -> tuple[str, ...]:
    """Comment lines for the forward: each output the compiler rewrote from the rule's form into a stable one."""
    lines: list[str] = []
    searched = {c.quantity: c for c in d.choices if c.changed}
    for name, written, computed in d.rewritten:
        choice = searched.get(name)
        # No numbers: a generated file changes when the code does, not when a measurement does.
        why = (
            "rulegen's canonical form"
            if choice is None
            else f"the form with the least error measured ({choice.family}; `rulegen show {d.rule.name} --why` "
            "gives the measurements)"
        )
        note = f"{name} = {_formula(written)} is computed as {_formula(computed)}, {why}."
        lines += textwrap.wrap(note, DOC_WIDTH - 10, break_long_words=False, break_on_hyphens=False)
    return tuple(lines)


def help_text(d: Derivation | SnippetDerivation, backend: str) -> str:
    """What `help()` of a `backend` function says: the rule's doc, its formulas, its inputs, its source."""
    rule = d.rule
    parts = [rule.doc.strip() or f"{rule.name}({', '.join(i.name for i in rule.inputs)}): a rulegen rule."]
    if isinstance(d, Derivation):
        parts.append("Forward:\n" + "\n".join(f"    {name} = {_formula(e)}" for name, e in d.forward))
        given = rule.derivatives is not None or rule.jvp is not None or rule.vjp is not None
        stabilised = [c for c in d.choices if c.changed]
        # The partials as the rule gave them or sympy derived them; the form computed is in the code.
        as_derived = {c.quantity: c.derived for c in stabilised}
        partials = [
            f"    d{out}/d{x} = {_formula(as_derived.get(f'd{out}/d{x}', d.jvp_partials[out, x]))}"
            for out in (o.name for o in rule.outputs)
            for x in (i.name for i in d.diff_inputs)
            if (out, x) in d.jvp_partials
        ]
        if partials:
            parts.append(f"Partials ({'from the rule' if given else 'derived by sympy'}):\n" + "\n".join(partials))
        if stabilised:
            # Names only: measured numbers would change the file whenever a measurement moves.
            quantities = ", ".join(dict.fromkeys(c.quantity for c in stabilised))
            parts.append(
                f"Computed in the form rulegen's accuracy search chose over the derived one: {quantities} "
                f"(`rulegen show {rule.name} --why` gives the forms and their measured error)."
            )
    else:
        bodies = [k for k in ("forward", "jvp", "vjp") if getattr(rule, k) is not None]
        parts.append(f"Forward and derivatives: Python bodies ({', '.join(bodies)}) in the rule file.")
    parts.append("Inputs:\n" + "\n".join(_input_line(i, backend) for i in rule.inputs))
    assumed = [i for i in rule.inputs if i.assume]
    if assumed:
        parts.append(_assumptions_paragraph(assumed))
    structures = [_structure_line(p) for p in rule.parameters if isinstance(p, Structured)]
    if structures:
        parts.append("Structures (the arrays above, as the function takes them):\n" + "\n".join(structures))
    if rule.returns is not None:
        parts.append(f"Returns:\n    {_structure_literal(rule.returns)}")
    parts.append(f"Generated by rulegen from {rule.source or 'a rule'}.")
    return "\n\n".join(parts)


def header_of(d: Derivation | SnippetDerivation, backend: str) -> Header:
    rule = d.rule
    # The source path lands in a comment: no line break may end it early.
    source = rule.source.encode("unicode_escape").decode("ascii")
    summary = f"{rule.name}: {rule.doc.strip()}" if rule.doc.strip() else f"{rule.name}: a rulegen rule."
    return Header(
        rule=rule.name,
        source=source,
        source_hash=rule.source_hash,
        module_doc=docstring(summary, 0),
        help=help_text(d, backend),
        # Each object its own docstring: the rule's doc is the module's and the function's already.
        class_help=f"The torch.autograd.Function behind `{rule.name}`, which applies it.",
    )


def doc_lines(header: Header) -> tuple[Docstring, ...]:
    """The public function's docstring, if it has one."""
    return (Docstring(header.help),) if header.help else ()
