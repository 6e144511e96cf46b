"""Stage 1, read and validate: rule files into immutable pydantic models that carry source locations.

`rules` (the rule format's models and reading), `errors` (located errors),
`source` (YAML read safely, with positions), `names` (the names generated
code keeps for itself).
"""
