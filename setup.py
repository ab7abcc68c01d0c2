"""Builds the C core (csrc/) as aiosendfile._core_c; metadata lives in setup.cfg."""

import os
import sys

from setuptools import Extension, setup

# The C core is Linux-only (sendfile(2) with MSG_MORE and SIGPIPE handling);
# elsewhere, or with AIOSENDFILE_NO_EXTENSIONS=1 (the aio-libs convention),
# the package runs on its pure-Python core.  A failing compiler on Linux is
# an error, never a silent downgrade.
BUILD_C_CORE = sys.platform.startswith("linux") and not os.environ.get(
    "AIOSENDFILE_NO_EXTENSIONS"
)

extensions = [
    Extension(
        "aiosendfile._core_c",
        sources=[
            "csrc/module.c",
            "csrc/errors.c",
            "csrc/sendfile_linux.c",
            "csrc/cached_linux.c",
            "csrc/residency_linux.c",
            "csrc/splice_linux.c",
            "csrc/open_linux.c",
            "csrc/pump_linux.c",
        ],
        depends=[
            "csrc/asf_cached.h",
            "csrc/asf_pump.h",
            "csrc/asf_config.h",
            "csrc/asf_errors.h",
            "csrc/asf_open.h",
            "csrc/asf_residency.h",
            "csrc/asf_sendfile.h",
            "csrc/asf_splice.h",
        ],
        extra_compile_args=["-Wall", "-Wextra", "-D_FILE_OFFSET_BITS=64"],
    )
]

setup(ext_modules=extensions if BUILD_C_CORE else [])
