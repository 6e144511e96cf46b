"""Stage 2, derive: bodies parsed as data, every derivative a rule lacks derived, forms chosen by measured error.

The facts the stage reads (`functions`, the function registry; `floors`,
the frameworks' releases; `routes`, each rule's route), then `expr`,
`symbols` and `snippet` (bodies as data), `forms` (canonical and stable
forms), `measure` and `stabilise` (bits of error, the form with the
least), and `partials` (partials, transposition, residual partials).
"""
