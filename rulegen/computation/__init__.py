"""How generated code computes sympy expressions, one model below the stages that derive and print them.

What is shared (`sharing`: the subexpressions a body computes once), how quotients are computed (`quotients`),
what a body costs eager torch (`cost`).  The derive stage measures expressions as generated code computes them
and chooses what torch saves by the cost; the plan stage prints by the same model.  It imports no stage.
"""
