"""Builds the compiled reader (llmload/client/transport/_cread.c) where a C compiler works; everything else is in
pyproject.toml.

The extension is optional, as simplejson's and markupsafe's speedups are: where no compiler is found or the build
fails, the install goes on without it and llmload reads with its pure-Python twin (the first run says so once).
``LLMLOAD_NO_EXTENSIONS=1`` skips the build.
"""

from __future__ import annotations

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that never fails the install: a missing or failing compiler leaves the Python reader."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # distutils' errors are not one hierarchy across setuptools versions
            self._skip(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._skip(exc)

    @staticmethod
    def _skip(exc: BaseException) -> None:
        print(f"llmload: the compiled reader was not built ({type(exc).__name__}: {exc}); llmload will read "
              "with its pure-Python reader", file=sys.stderr)


extensions = []
if os.environ.get("LLMLOAD_NO_EXTENSIONS", "") in ("", "0"):
    extensions.append(Extension("llmload.client.transport._cread", ["llmload/client/transport/_cread.c"],
                                extra_compile_args=["-O2", "-std=c11", "-Wall"], optional=True))

setup(ext_modules=extensions, cmdclass={"build_ext": OptionalBuildExt})
