"""rulegen: one YAML rule per differentiable function, compiled into JAX and PyTorch custom derivatives."""

__version__ = "0.1.0"

#: The compiler's stages in the order data flows through them: each a folder of the package (the command line's
#: modules last, at the top), with its modules in order.  A module imports only modules before it here (its
#: folder's package, `__init__`, counting as the folder's last; a subpackage's modules are `subpackage.module`, and
#: the subpackage itself, its `__init__`, follows them): the import test and the README's layout table both read
#: this list.
STAGES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "computation",
        "how generated code computes an expression (what it shares, how it divides, what it costs, how it is "
        "printed once), below the stages that derive and print it",
        ("printed", "quotients", "sharing", "cost"),
    ),
    (
        "spec",
        "read and validate the rule files",
        ("errors", "names", "source", "normalise", "model", "consistency", "ruleset", "reading", "rules"),
    ),
    (
        "derive",
        "facts (function registry, framework floors, routes); bodies parsed as data; derive, rewrite, stabilise by "
        "measured error; choose what torch saves",
        (
            *("stored", "functions", "floors", "routes", "symbols", "expr", "snippet", "forms", "measure"),
            *(
                "stabilise.budget",
                "stabilise.cache",
                "stabilise.flushed",
                "stabilise.points",
                "stabilise.asymptotic",
                "stabilise.families",
            ),
            *("stabilise.scaling", "stabilise.regimes", "stabilise.gate", "stabilise.cost", "stabilise.policy"),
            *("stabilise.saturation", "stabilise.search", "stabilise", "derivation", "saved", "partials"),
        ),
    ),
    (
        "plan",
        "plan each backend: the code model, printers, in-place bodies, one planner per body kind and backend",
        (
            *("forms", "code", "model", "printers", "torch_route", "inplace", "symbolic", "header", "emit"),
            *("beta_runtime", "torch", "snippet", "jax", "snippet_jax", "snippet_torch"),
        ),
    ),
    ("render", "render through the template, format and write", ("layout", "write", "build", "beta_runtime")),
    (
        "check",
        "check and measure the generated rules",
        (
            *("outcome", "lowering", "points", "subject", "shard_map_worker", "derivatives", "durability"),
            *("transforms", "dtypes", "numerical", "accuracy", "accuracy_snippet", "accuracy_report", "registry"),
            *("report", "run", "against"),
        ),
    ),
    ("", "command line", ("cli", "pytest_plugin", "__main__")),
)
