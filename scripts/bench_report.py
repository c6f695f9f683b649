"""Shared by the benchmarks: write a markdown section into BENCHMARKS.md, replacing its older copy."""

from __future__ import annotations

import platform
import re
import sys
from pathlib import Path

import torch

BENCHMARKS = Path(__file__).resolve().parent.parent / 'BENCHMARKS.md'
HEADER = '# Benchmarks\n\nEach section is written by the script it names; rerun the command to refresh it.\n'


def machine() -> str:
    """One line naming the machine and versions, for the record."""
    return (f'{platform.machine()}, {len(__import__("os").sched_getaffinity(0))} cores, Python '
            f'{platform.python_version()}, torch {torch.__version__}')


def write_section(name: str, command: str, body: str) -> None:
    """Replace (or append) the section ``name`` of BENCHMARKS.md and print it."""
    section = f'<!-- {name} -->\n## {name}\n\n```\n{command}\n```\n\n{machine()}\n\n{body.strip()}\n<!-- /{name} -->\n'
    text = BENCHMARKS.read_text() if BENCHMARKS.exists() else HEADER
    pattern = re.compile(rf'<!-- {re.escape(name)} -->.*?<!-- /{re.escape(name)} -->\n', re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip() + '\n\n' + section
    BENCHMARKS.write_text(text)
    sys.stdout.write(section)
