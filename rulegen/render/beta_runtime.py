"""Write the runtime's beta cases (`rulegen/runtime/<backend>/_beta_cases.py`), formatted as a package's modules are.

The plan stage prints their source (`rulegen.plan.beta_runtime`); this stage sorts its imports and formats it
with the package's ruff settings (`write.format_sources`) and writes it into the runtime, which every build
copies from.  `python -m rulegen.render.beta_runtime [jax|torch]` regenerates them (minutes of CPU).
"""

from __future__ import annotations

import sys
from pathlib import Path

from rulegen.plan import beta_runtime
from rulegen.render.layout import RUNTIME
from rulegen.render.write import format_sources


def path_of(backend: beta_runtime.Backend) -> Path:
    return RUNTIME / backend / "_beta_cases.py"


def module_source(backend: beta_runtime.Backend) -> str:
    """`<backend>/_beta_cases.py` as a regeneration writes it."""
    relative = f"{backend}/_beta_cases.py"
    return format_sources({relative: beta_runtime.module_text(backend)})[relative]


def shipped_digest(backend: beta_runtime.Backend) -> str | None:
    """The digest the shipped `<backend>/_beta_cases.py` says it was printed from."""
    for line in path_of(backend).read_text().splitlines():
        if line.startswith(beta_runtime.DIGEST_PREFIX):
            return line.removeprefix(beta_runtime.DIGEST_PREFIX).strip()
    return None


def write(backend: beta_runtime.Backend) -> Path:
    path = path_of(backend)
    path.write_text(module_source(backend))
    return path


if __name__ == "__main__":
    for name in sys.argv[1:] or ("jax", "torch"):
        print(write(name))  # type: ignore[arg-type]
