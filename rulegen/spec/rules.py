"""Stage 1: read rule files into validated, immutable models.

What the other stages read of the spec stage, from the modules that define
it: the models (`rulegen.spec.model`), the values the YAML's forms are
normalised to (`rulegen.spec.normalise`), a rule's cross-field checks
(`rulegen.spec.consistency`), reading files (`rulegen.spec.reading`) and
the analysis of a build's rules together (`rulegen.spec.ruleset`).
"""

from __future__ import annotations

from rulegen.spec.consistency import consistency_errors
from rulegen.spec.model import (
    ASSUMPTION_CONDITIONS,
    ASSUMPTION_DOMAINS,
    INPUT_TAG,
    SNIPPET_TAG,
    STRUCTURE_TAG,
    SYMPY_TAG,
    Assumption,
    Body,
    Checks,
    Domain,
    Float64Array,
    Float64Data,
    Input,
    InputList,
    InputOptions,
    Name,
    Node,
    Number,
    Output,
    OutputList,
    OutputOptions,
    Parameter,
    ParameterList,
    Point,
    PointJvp,
    Rule,
    RuleFile,
    SnippetBody,
    Structured,
    StructuredOptions,
    SympyBody,
    TextField,
    Tolerance,
)
from rulegen.spec.normalise import (
    NAMED_TUPLE_KEY,
    SNIPPET_KEYS,
    STRUCTURE_KINDS,
    Returned,
    StructureKind,
    Text,
)
from rulegen.spec.reading import (
    json_schema,
    read_rule_file,
    read_rules,
    rule_files,
)
from rulegen.spec.ruleset import (
    callees,
    clash_errors,
    read_names,
)

__all__ = [
    "ASSUMPTION_CONDITIONS",
    "ASSUMPTION_DOMAINS",
    "INPUT_TAG",
    "NAMED_TUPLE_KEY",
    "SNIPPET_KEYS",
    "SNIPPET_TAG",
    "STRUCTURE_KINDS",
    "STRUCTURE_TAG",
    "SYMPY_TAG",
    "Assumption",
    "Body",
    "Checks",
    "Domain",
    "Float64Array",
    "Float64Data",
    "Input",
    "InputList",
    "InputOptions",
    "Name",
    "Node",
    "Number",
    "Output",
    "OutputList",
    "OutputOptions",
    "Parameter",
    "ParameterList",
    "Point",
    "PointJvp",
    "Returned",
    "Rule",
    "RuleFile",
    "SnippetBody",
    "StructureKind",
    "Structured",
    "StructuredOptions",
    "SympyBody",
    "Text",
    "TextField",
    "Tolerance",
    "callees",
    "clash_errors",
    "consistency_errors",
    "json_schema",
    "read_names",
    "read_rule_file",
    "read_rules",
    "rule_files",
]
