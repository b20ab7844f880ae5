"""The optional native accelerator (toolid/prune.py): built when a C compiler is there, and
skipped otherwise (toolid then runs as pure Python). Everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("toolid._native", ["toolid/_native.c"], optional=True)])
