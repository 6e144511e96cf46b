"""What the bundled rules' built torch Functions keep for backward: nothing one cheap operation recomputes.

Eager, an intermediate costs a pass over memory per operation to recompute,
so the forward keeps what is dearer than one (bounded by what autodiff
keeps). Compiled (`fuse`), arithmetic is free and only functions cost: an
intermediate is kept when keeping it spares the backward two functions or
more, against the write and the read that saving it costs.
"""

from __future__ import annotations

from rulegen.derive.partials import Derivation, derive_rule
from rulegen.spec.rules import read_rules


def test_no_bundled_rule_keeps_what_one_cheap_operation_computes_from_what_else_it_keeps():
    """A product beside its factors, x / b beside b, |y| beside y: each a tensor held until backward to spare one
    pass. to_polar kept six (b, 1/b, x/b, y/b, |y| and the scaled root), then two (b and the scaled root), then its
    radius (the hypot torch's own backward reads); its partials one runtime call of its inputs, it keeps none beyond
    them."""
    from rulegen.derive.forms import silu_derivatives
    from rulegen.derive.saved import _one_step_from_the_rest, saved_intermediates, with_fused_forms
    from rulegen.spec.rules import rule_files
    from tests.conftest import RULES as BUNDLED

    rules = read_rules(rule_files([BUNDLED]))
    names = [r.name for r in rules]
    kept = {}
    for rule in rules:
        if rule.fuse or not isinstance(d := derive_rule(rule, names), Derivation):
            continue
        # As plan_torch chooses them.
        statics = tuple(i.name for i in rule.inputs if i.static)
        integral = tuple(i.name for i in rule.inputs if not i.static and i.dtype in ("int", "bool"))
        forms = with_fused_forms(with_fused_forms(d), (silu_derivatives(statics, integral),))
        chosen = saved_intermediates(forms, set(d.symbols))
        outputs = {e: forms.symbols[n] for n, e in forms.forward}
        arrays = {d.symbols[i.name] for i in rule.inputs if not i.static}
        assert not _one_step_from_the_rest(chosen, outputs, arrays), (rule.name, chosen)
        kept[rule.name] = sorted(map(str, chosen.values()))
    assert kept["to_polar"] == []
