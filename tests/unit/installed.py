"""The host programs laid out as on a host: each one under its file name, side by side in one directory.

In the package each feature keeps its programs in its own `host/` folder; on a host they are installed in one
directory and import each other by bare name. A test that runs a program as a process runs it from here.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from functools import cache
from pathlib import Path

from specfleet.fleet.programs import program, program_names


def source(name: str) -> Path:
    """The packaged file of a host program (for reading it, or importing it in-process)."""
    return Path(str(program(name)))


@cache
def installed() -> Path:
    """One directory per test process with every host program copied in, as a host's bin directory holds them."""
    folder = Path(tempfile.mkdtemp(prefix="specfleet-installed-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    for name in program_names():
        shutil.copy2(source(name), folder / name)
    return folder


def folders() -> list[str]:
    """Every package folder holding host programs (for in-process imports of programs that import a sibling)."""
    return sorted({str(source(name).parent) for name in program_names()})
