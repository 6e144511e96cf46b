"""Private framework APIs, bound or checked at import: a release that lacks one fails there.

The helpers import each private torch or JAX API they call under `guarded`
(or name those they read later to `require`): a framework release that lacks
one fails at the generated package's import with the API's name, the
installed release and the one the API was checked on, never with an
AttributeError in the middle of a call.  `rulegen.derive.floors.PRIVATE_APIS`
lists them, with where each is used and what stands in for it.
"""

import contextlib
from collections.abc import Iterator
from types import ModuleType

#: The releases the private APIs were checked on (`rulegen.derive.floors.PRIVATE_APIS`).
CHECKED_ON = {"torch": "2.13.0", "jax": "0.10.2"}


@contextlib.contextmanager
def guarded(framework: ModuleType) -> Iterator[None]:
    """A missing name of `framework` (ImportError, AttributeError) as an ImportError saying so."""
    try:
        yield
    except (ImportError, AttributeError) as error:
        name = framework.__name__
        raise ImportError(
            f"{name} {framework.__version__} lacks a private API that this package's generated "
            f"code calls ({error}); it was checked on {name} {CHECKED_ON[name]}: install a {name} "
            "release that has it"
        ) from error


def require(framework: ModuleType, module: object, *names: str) -> None:
    """Fail as `guarded` does unless `module` has each of `names` (read later, at calls)."""
    with guarded(framework):
        for name in names:
            getattr(module, name)
