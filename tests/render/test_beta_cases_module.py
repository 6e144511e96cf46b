"""The runtime's beta cases (`rulegen/runtime/<backend>/_beta_cases.py`): what the registry's sympy prints, formatted
as the render stage formats a package's modules."""

import os

import pytest

from rulegen.plan import beta_runtime
from rulegen.render import beta_runtime as beta_module
from rulegen.render.write import format_sources

BACKENDS = ("jax", "torch")


def _split(text: str) -> tuple[list[str], str]:
    """A module's import lines and what follows them."""
    lines = text.split("\n")
    imports = [k for k, line in enumerate(lines) if line.startswith(("import ", "from "))]
    return [lines[k] for k in imports], "\n".join(lines[imports[-1] + 1 :])


def test_the_shipped_beta_cases_were_printed_from_the_registry_s():
    # Seconds: the cases' sha256 and the module's header, where printing the cases takes minutes (the slow test
    # below).  Both backends in one test: building the cases is most of it, and two tests on two workers built
    # them twice.
    expected = beta_runtime.digest()
    stale = [backend for backend in BACKENDS if beta_module.shipped_digest(backend) != expected]
    assert not stale, (
        f"run `python -m rulegen.render.beta_runtime {' '.join(stale)}`: the registry's beta cases changed"
    )
    for backend in BACKENDS:
        shipped = beta_module.path_of(backend).read_text()
        imports, rest = _split(shipped)
        # The plan stage's header, its imports in any order, sorted and formatted by the render stage's settings.
        printed = beta_runtime.header(backend, reversed(imports)) + "\n" + rest
        relative = f"{backend}/_beta_cases.py"
        assert format_sources({relative: printed})[relative] == shipped, backend


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("RULEGEN_REPRINT_BETA"),
    reason="14 minutes of CPU, past CI's budget: RULEGEN_REPRINT_BETA=1 runs it (the digest test above runs always)",
)
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_the_shipped_beta_cases_are_the_registry_s(backend):
    # Minutes of CPU: the cases print as the rules' bodies do. Regenerate with `python -m rulegen.render.beta_runtime`.
    # What the printed cases compute is checked on every run by the conformance matrix's beta cells and
    # tests/runtime/test_beta_partials.py; this checks that the printer would write them so today.
    path = beta_module.path_of(backend)
    assert beta_module.module_source(backend) == path.read_text(), (
        f"{path} is stale: run `python -m rulegen.render.beta_runtime {backend}`"
    )
