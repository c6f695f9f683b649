"""Shared by the benchmarks: write a markdown section into BENCHMARKS.md, replacing its older copy."""

from __future__ import annotations

import os
import platform
import re
import sys
from importlib.metadata import version
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / 'BENCHMARKS.md'
HEADER = '# Benchmarks\n\nEach section below is written by the script it names; rerun the command to refresh it.\n'


def machine() -> str:
    """One line naming the machine and versions, for the record.

    torch's version is read from its installed metadata, not by importing it: a
    benchmark that times child processes must not grow its own resident set first
    (a child's peak RSS starts from its parent's at the fork).
    """
    return (f'{platform.machine()}, {len(os.sched_getaffinity(0))} cores, Python '
            f'{platform.python_version()}, torch {version("torch")}')


def write_section(name: str, command: str, body: str) -> None:
    """Replace (or append) the section ``name`` of BENCHMARKS.md and print it."""
    section = f'<!-- {name} -->\n## {name}\n\n```\n{command}\n```\n\n{machine()}\n\n{body.strip()}\n<!-- /{name} -->\n'
    text = BENCHMARKS.read_text() if BENCHMARKS.exists() else HEADER
    pattern = re.compile(rf'<!-- {re.escape(name)} -->.*?<!-- /{re.escape(name)} -->\n', re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip() + '\n\n' + section
    BENCHMARKS.write_text(text)
    sys.stdout.write(section)
