"""Soak tests: minutes of load and leak checks, outside the default run.

Every test here is marked `soak`, which pyproject.toml's addopts deselects
(`-m 'not soak'`).  Run them all with one command:

    python -m pytest -m soak -p no:cacheprovider
"""
