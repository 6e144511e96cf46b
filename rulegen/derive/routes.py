"""Which route carries a rule in each backend: one decision, made once, read by everyone else.

A rule reaches JAX by one of seven routes and gets torch's two modes from
one of four sources.  `choose_routes` decides from what the rule gives; the
derivations carry its answer, the planners build the route it names, and
`rulegen test` reads from it which modes a backend lacks, and why.

JAX routes, first row that applies:

| the rule has                                 | JAX route    | forward mode          |
|----------------------------------------------|--------------|-----------------------|
| a `torch:`-only forward                      | `bridge`     | none (callbacks)      |
| a `numpy:` (host) forward                    | `primitive`  | the JVP, or the VJP transposed |
| snippet bodies, no `jvp` and no `vjp`        | `plain`      | JAX's own             |
| `mode: vjp`                                  | `custom_vjp` | none                  |
| both a `jvp` and a `vjp`                     | `linear_map` | the JVP; reverse mode is the VJP |
| a `jvp`, or symbolic partials (given or derived) | `custom_jvp` | the JVP; reverse mode by transposition |
| a snippet `vjp` that is the true derivative  | `transpose`  | the VJP transposed    |
| a snippet `vjp` that is not (`true_derivative: false`) | `custom_vjp` | none  |

torch (always an `autograd.Function`, or the plain body for `plain`):
`jvp` and `backward` each come from the rule (`given`), from the other mode
by linear transposition (`transpose`: a VJP transposes only when it is the
true derivative), from sympy (`derived`), or not at all (`none`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType


class JaxRoute(StrEnum):
    CUSTOM_JVP = "custom_jvp"
    CUSTOM_VJP = "custom_vjp"
    LINEAR_MAP = "linear_map"
    TRANSPOSE = "transpose"
    PRIMITIVE = "primitive"
    BRIDGE = "bridge"
    PLAIN = "plain"


class Source(StrEnum):
    """Where one of torch's modes comes from."""

    GIVEN = "given"
    TRANSPOSE = "transpose"
    DERIVED = "derived"
    NONE = "none"


@dataclass(frozen=True)
class Gives:
    """What a rule gives that the choice depends on."""

    name: str
    symbolic: bool  # every body is a sympy expression
    jvp: bool
    vjp: bool
    host: bool = False  # a `numpy:` forward
    torch_only: bool = False  # a `torch:` forward without a JAX one
    mode: str = "auto"
    true_derivative: bool = True


@dataclass(frozen=True)
class Routes:
    jax: JaxRoute
    torch_jvp: Source
    torch_backward: Source
    # Per backend without forward mode ("jax", "torch"): why, as `rulegen test` reports it.
    no_forward_mode: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        # A mappingproxy does not pickle; build workers send routes back to the build.
        return _routes, (self.jax, self.torch_jvp, self.torch_backward, dict(self.no_forward_mode))


def _routes(jax: JaxRoute, torch_jvp: Source, torch_backward: Source, no_forward_mode: dict[str, str]) -> Routes:
    return Routes(jax, torch_jvp, torch_backward, MappingProxyType(no_forward_mode))


def choose_routes(gives: Gives) -> Routes:
    """The routes of a rule (see the module's table)."""
    no_forward: dict[str, str] = {}
    jax, jax_why = _jax_route(gives)
    if jax_why:
        no_forward["jax"] = jax_why
    torch_jvp, torch_backward = _torch_sources(gives)
    if torch_jvp == Source.NONE and gives.vjp and not gives.symbolic:
        no_forward["torch"] = _not_linear(gives)
    return Routes(jax, torch_jvp, torch_backward, MappingProxyType(no_forward))


def _not_linear(gives: Gives) -> str:
    return (
        f"{gives.name} has no forward mode: its VJP is not the derivative of its forward "
        "(true_derivative: false), so it is not a linear map that can be transposed"
    )


def _jax_route(gives: Gives) -> tuple[JaxRoute, str]:
    """The first row of the table that applies, and why it has no forward mode ("" where it has)."""
    if gives.torch_only:
        return JaxRoute.BRIDGE, "a torch-only rule reaches JAX through callbacks that carry reverse mode only"
    if gives.host:
        without = not gives.jvp and gives.vjp and not gives.true_derivative
        return JaxRoute.PRIMITIVE, _not_linear(gives) if without else ""
    if gives.mode == "vjp":
        return JaxRoute.CUSTOM_VJP, "mode: vjp: JAX's custom_vjp has no forward mode"
    if gives.symbolic:
        return (JaxRoute.LINEAR_MAP if gives.jvp and gives.vjp else JaxRoute.CUSTOM_JVP), ""
    if not gives.jvp and not gives.vjp:
        return JaxRoute.PLAIN, ""
    if gives.jvp:
        return (JaxRoute.LINEAR_MAP if gives.vjp else JaxRoute.CUSTOM_JVP), ""
    if gives.true_derivative:
        return JaxRoute.TRANSPOSE, ""
    return JaxRoute.CUSTOM_VJP, _not_linear(gives)


def _torch_sources(gives: Gives) -> tuple[Source, Source]:
    """Where torch's `jvp` and `backward` come from."""
    if gives.symbolic:
        return (Source.GIVEN if gives.jvp else Source.DERIVED), (Source.GIVEN if gives.vjp else Source.DERIVED)
    if gives.jvp:
        jvp = Source.GIVEN
    elif gives.vjp and gives.true_derivative:
        jvp = Source.TRANSPOSE
    else:
        jvp = Source.NONE
    backward = Source.GIVEN if gives.vjp else (Source.TRANSPOSE if gives.jvp else Source.NONE)
    return jvp, backward


def describe(routes: Routes) -> str:
    """One line for people: `rulegen show` prints it above the code."""
    line = f"JAX: {routes.jax}; torch: jvp {routes.torch_jvp}, backward {routes.torch_backward}"
    reasons: dict[str, list[str]] = {}
    for backend, why in sorted(routes.no_forward_mode.items()):
        reasons.setdefault(why, []).append(backend)
    missing = "; ".join(f"no forward mode in {' or '.join(b)}: {why}" for why, b in reasons.items())
    return f"{line} ({missing})" if missing else line
