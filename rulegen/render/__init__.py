"""Stage 4, render and write: modules laid out through the template, formatted, written atomically.

`layout` (the template and the runtime helpers), `write` (`ruff format`,
atomic writes, the manifest), `build` (the pipeline, stage after stage).
"""
