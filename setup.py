"""The optional native accelerator (toolid/_native.c, toolid/native.py): built when a C
compiler is there, and skipped otherwise (toolid then runs as pure Python). Everything else is
in pyproject.toml."""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

#: Every warning is an error (a compiler that warns fails the optional build: pure Python).
WARNINGS = ["-Wall", "-Wextra", "-Werror"]


class BuildExt(build_ext):
    def build_extensions(self) -> None:
        if self.compiler.compiler_type == "unix":  # gcc and clang
            for extension in self.extensions:
                extension.extra_compile_args = [*extension.extra_compile_args, *WARNINGS]
        super().build_extensions()


setup(
    ext_modules=[Extension("toolid._native", ["toolid/_native.c"], optional=True)],
    cmdclass={"build_ext": BuildExt},
)
