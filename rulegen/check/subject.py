"""The subject of every check: one rule, its two implementations, and a sample of its inputs.

A subject is built once per rule and seed (the package's functions, the
sample, what the derivation says of forward mode); each check gets a fresh
copy of it (`Subject.fresh`), so that what one check draws or redraws never
reaches another, and a rule's outcomes stay those of its seed and name.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np

from rulegen.check.outcome import ATOL, RTOL, compare
from rulegen.check.points import flat_call, sample
from rulegen.spec.rules import Rule, SympyBody

T = TypeVar("T")


def to_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        return value.detach().numpy(force=True)
    return np.asarray(value)


def from_numpy(backend: str) -> Callable[[Any], Any]:
    """The backend's array of a NumPy array: `jnp.asarray` or `torch.from_numpy`."""
    if backend == "jax":
        import jax.numpy as jnp

        return jnp.asarray
    import torch

    return torch.from_numpy


@dataclass
class Subject:
    """One rule with its two implementations and a sample point."""

    rule: Rule
    jax_fn: Callable[..., Any]
    torch_fn: Callable[..., Any]
    values: list[Any]  # every argument, numpy arrays for arrays
    diff: list[int]  # positions of differentiable inputs
    outputs: list[int]  # positions of differentiable outputs
    rtol: float
    atol: float
    rng: np.random.Generator
    no_forward_mode: dict[str, str] = dataclasses.field(default_factory=dict)
    elementwise: bool = True
    note: str = ""
    known: tuple[str, ...] = ()  # the rules of the build, which bodies may call
    seed: int = 0
    # The frameworks not installed, with why (a one-framework audit): the checks use only the others.
    absent: dict[str, str] = dataclasses.field(default_factory=dict)
    # What checks of this rule compute alike (the mpmath forward), shared by its copies.
    memo: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @property
    def backends(self) -> tuple[str, ...]:
        """The frameworks the checks call: both, but for one that is not installed."""
        return tuple(b for b in ("jax", "torch") if b not in self.absent)

    def fn(self, backend: str) -> Callable[..., Any]:
        """The backend's implementation, taking every argument."""
        return self.jax_fn if backend == "jax" else self.torch_fn

    def f(self, backend: str) -> Callable[..., tuple[Any, ...]]:
        """The backend's implementation as a function of the differentiable inputs (`jax_f`, `torch_f`)."""
        return self.jax_f if backend == "jax" else self.torch_f

    @property
    def implementations(self) -> dict[str, Callable[..., Any]]:
        """Each installed backend's implementation, by backend."""
        return {backend: self.fn(backend) for backend in self.backends}

    @property
    def jax_forward_mode(self) -> bool:
        return "jax" not in self.no_forward_mode

    @property
    def torch_forward_mode(self) -> bool:
        return "torch" not in self.no_forward_mode

    def skipped(self, part: str) -> bool:
        """Whether the rule's `checks.skip` names this part of a check (e.g. `vmap`)."""
        return part in self.rule.checks.skip

    def fresh(self) -> Subject:
        """A copy for one check: the sample's arrays and the random state as they were when the subject was built.

        A check may redraw the sample or draw directions from the generator;
        the next check starts again from the same point.
        """
        return dataclasses.replace(
            self,
            values=[v.copy() if isinstance(v, np.ndarray) else v for v in self.values],
            rng=copy.deepcopy(self.rng),
        )

    def once(self, key: str, make: Callable[[], T]) -> T:
        """`make()`, made at the first call for `key` of any copy of this subject and kept for the others."""
        if key not in self.memo:
            self.memo[key] = make()
        return cast(T, self.memo[key])

    def bound(
        self, fn: Callable[..., Any], convert: Callable[[Any], Any], over: Sequence[int] | None = None
    ) -> Callable[..., tuple[Any, ...]]:
        """`fn` as a function of the inputs at positions `over` (the differentiable ones), returning the
        differentiable outputs.

        The other arrays are converted here, once: inside a function Dynamo
        traces under torch.func, `torch.from_numpy` of a constant trips its
        guards ("Guard failed on the same frame it was created").
        """
        base = [convert(v) if isinstance(v, np.ndarray) else v for v in self.values]
        positions = self.diff if over is None else list(over)

        def f(*xs: Any) -> tuple[Any, ...]:
            full = list(base)
            for k, x in zip(positions, xs, strict=True):
                full[k] = x
            out = fn(*full)
            outs = out if isinstance(out, tuple) else (out,)
            return tuple(outs[k] for k in self.outputs)

        return f

    def jax_f(self, *xs: Any) -> tuple[Any, ...]:
        import jax.numpy as jnp

        return self.bound(self.jax_fn, jnp.asarray)(*xs)

    def torch_f(self, *xs: Any) -> tuple[Any, ...]:
        import torch

        return self.bound(self.torch_fn, torch.from_numpy)(*xs)

    def xs(self) -> list[np.ndarray]:
        return [self.values[k] for k in self.diff]

    # Every message names inputs, outputs and partials as the rule does, never by position.

    def output_name(self, k: int) -> str:
        """The k-th differentiable output's name: the k-th result of `jax_f` and `torch_f`."""
        return self.rule.outputs[self.outputs[k]].name

    def input_name(self, k: int) -> str:
        """The k-th differentiable input's name: the k-th argument of `jax_f` and `torch_f`."""
        return self.rule.inputs[self.diff[k]].name

    def partial(self, k: int) -> str:
        """The k-th gradient the checks take (of the differentiable outputs' sum) by name: `dout/dy`."""
        outputs = [self.rule.outputs[o].name for o in self.outputs]
        total = outputs[0] if len(outputs) == 1 else f"({' + '.join(outputs)})"
        return f"d{total}/d{self.input_name(k)}"

    def where(self, index: tuple[int, ...] = (), shape: tuple[int, ...] = ()) -> str:
        """Every array input's value by name (`x=23.3, y=1`), at `index` of their broadcast to `shape`.

        "" where the inputs do not broadcast to `shape` (a Jacobian's block,
        a reduction's result): the index alone then says where.
        """
        named = []
        for value, spec in zip(self.values, self.rule.inputs, strict=True):
            if spec.static or not isinstance(value, np.ndarray):
                continue
            try:
                entry = np.broadcast_to(value, shape)[index]
            except (ValueError, IndexError):
                return ""
            named.append(f"{spec.name}={entry:.8g}" if entry.dtype.kind in "fc" else f"{spec.name}={entry}")
        return ", ".join(named)

    def positions(self) -> str:
        """What the frameworks' own checks (gradcheck) number: `output 0 = out, input 1 = y`."""
        outputs = [f"output {k} = {self.output_name(k)}" for k in range(len(self.outputs))]
        return ", ".join([*outputs, *(f"input {k} = {self.input_name(k)}" for k in range(len(self.diff)))])

    def at_first(self, mask: np.ndarray) -> str:
        """` at x=.., y=..`: the inputs where `mask` (shaped like a result) first holds, or ""."""
        found = np.argwhere(mask)
        inputs = self.where(tuple(int(i) for i in found[0]), mask.shape) if len(found) else ""
        return f" at {inputs}" if inputs else ""

    def compare(self, name: str, got: Any, expected: Any, rtol: float, atol: float) -> None:
        """`compare` naming the inputs where `got` is off."""
        compare(name, got, expected, rtol, atol, self.where)


_DERIVED: dict[tuple[object, ...], Any] = {}


def derived(rule: Rule, known: tuple[str, ...]) -> Any:
    """The rule's derivation, once per rule and set of known rules."""
    from rulegen.derive.partials import derive_rule

    key = (rule.source, rule.name, rule.source_hash, rule.stabilise, rule.accuracy, *known)
    if key not in _DERIVED:
        _DERIVED[key] = derive_rule(rule, known)
    return _DERIVED[key]


def _forward_modes(rule: Rule, known: Sequence[str]) -> tuple[dict[str, str], bool]:
    """Why each backend has no forward mode (absent: it has one), and whether the rule is elementwise."""
    from rulegen.derive.snippet import SnippetDerivation

    derivation = derived(rule, tuple(sorted(known)))
    elementwise = not isinstance(derivation, SnippetDerivation) or (
        derivation.forward["torch"].kind == "sympy" or (derivation.host and rule.batching == "elementwise")
    )
    return dict(derivation.routes.no_forward_mode), elementwise


def _pointwise(s: Subject) -> None:
    """Fall back to one point of the sample when the rule does not take the sample's arrays whole.

    A rule whose bodies are scalar code (a `lax.while_loop` on a scalar
    condition) cannot run on a sample of several points; its derivatives
    are then checked at the first point of each array.
    """
    try:
        for backend in s.backends:
            convert = from_numpy(backend)
            s.fn(backend)(*[convert(v) if isinstance(v, np.ndarray) else v for v in s.values])
    except Exception as exc:
        arrays = [v for v in s.values if isinstance(v, np.ndarray)]
        if not arrays or any(v.ndim != 1 or len(v) != len(arrays[0]) for v in arrays) or s.elementwise:
            raise
        s.values = [np.asarray(v[0]) if isinstance(v, np.ndarray) else v for v in s.values]
        s.note = f" (at one point of the sample: the rule raised {type(exc).__name__} on the whole sample)"


def subject_of(
    rule: Rule,
    jax_pkg: Any,
    torch_pkg: Any,
    seed: int,
    known: Sequence[str] = (),
    absent: dict[str, str] | None = None,
) -> Subject:
    """The subject of `rule` at `seed`; `absent`: the frameworks not installed, with why, which nothing calls."""
    rng = np.random.default_rng([seed, *rule.name.encode()])
    tolerance = rule.checks.tolerance
    no_forward_mode, elementwise = _forward_modes(rule, known or [rule.name])
    subject = Subject(
        rule=rule,
        jax_fn=flat_call(rule, getattr(jax_pkg, rule.name)),
        torch_fn=flat_call(rule, getattr(torch_pkg, rule.name)),
        values=sample(rule, rng),
        diff=[k for k, i in enumerate(rule.inputs) if i.differentiable],
        outputs=[k for k, o in enumerate(rule.outputs) if o.differentiable],
        rtol=tolerance.rtol if tolerance else RTOL,
        atol=tolerance.atol if tolerance else ATOL,
        rng=rng,
        no_forward_mode=no_forward_mode,
        elementwise=elementwise,
        known=tuple(sorted(known or [rule.name])),
        seed=seed,
        absent=dict(absent or {}),
    )
    if rule.checks.sample is not None:
        _pointwise(subject)
    return subject


def smaller(s: Subject) -> Subject:
    """The sample cut to four entries per array when all arrays share a shape: Jacobians stay small."""
    shapes = {np.shape(v) for v in s.values if isinstance(v, np.ndarray)}
    if not s.elementwise or len(shapes) != 1 or not next(iter(shapes)):
        return s
    return dataclasses.replace(s, values=[v.reshape(-1)[:4] if isinstance(v, np.ndarray) else v for v in s.values])


def forward_kind(rule: Rule) -> str:
    forward = rule.forward
    return (
        "sympy"
        if isinstance(forward, SympyBody)
        else " ".join(k for k in ("python", "jax", "torch", "numpy") if getattr(forward, k) is not None)
    )
