"""The report (layer L3): results.md and plots drawn from result files alone, never from a target.

`render.render(out_dir)` is the entry; `markdown` writes the tables, `plots` the figures, `common` what both share.
`python -m host.report OUT_DIR` runs it from a shell.
"""
