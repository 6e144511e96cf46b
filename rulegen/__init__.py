"""rulegen: one YAML rule per differentiable function, compiled into JAX and PyTorch custom derivatives."""

__version__ = "0.1.0"

#: The compiler's stages in the order data flows through them, each with its modules (a package stands for its
#: folder).  A module imports only modules of its own row before it or of earlier rows: the import test and the
#: README's layout table both read this list.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("read and validate the rule files", ("errors", "source", "names", "spec")),
    ("facts: the function registry, framework floors, route table", ("functions", "floors", "routes")),
    ("parse bodies as data", ("expr", "symbols", "snippet")),
    ("derive, rewrite, stabilise by measured error", ("forms", "measure", "stabilise", "derive")),
    ("plan each backend", ("saving", "code", "printers", "inplace", "plan")),
    ("render and write", ("render", "write", "build")),
    ("check, measure, command line", ("check", "accuracy_report", "cli", "pytest_plugin", "__main__")),
)
