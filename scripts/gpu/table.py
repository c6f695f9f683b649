"""The rows of the GPU check, its table, and the JSON result that holds both with the machine's versions.

Example:
    >>> rows = [Row('resume, 1 rank', 'samples (ledger)', 'ok', 'the same indices')]
    >>> failed(rows), render(rows).splitlines()[0]
    ([], '| part           | check            | result   | detail           |')
"""

from __future__ import annotations

import json
import platform
import sys
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

__all__ = ['FAIL', 'OK', 'OVER_TARGET', 'REPORTED', 'RESULTS', 'Row', 'failed', 'machine', 'render', 'write_result']

OK, FAIL, REPORTED, OVER_TARGET = 'ok', 'FAIL', 'reported', 'over target'
#: What a row's result may be: only FAIL fails the check; a measurement over its target is said, not failed.
RESULTS = (OK, FAIL, REPORTED, OVER_TARGET)


@dataclass(frozen=True)
class Row:
    """One line of the table: which part and check, its result (one of :data:`RESULTS`) and what was seen."""

    part: str
    check: str
    result: str
    detail: str

    def __post_init__(self) -> None:
        if self.result not in RESULTS:
            raise ValueError(f'Row result must be one of {", ".join(RESULTS)}, got {self.result!r}')


def verdict(ok: bool) -> str:
    """``ok`` or ``FAIL``.

    Example:
        >>> verdict(True), verdict(False)
        ('ok', 'FAIL')
    """
    return OK if ok else FAIL


def failed(rows: list[Row]) -> list[Row]:
    """The rows that fail the check."""
    return [row for row in rows if row.result == FAIL]


def render(rows: list[Row]) -> str:
    """The rows as one markdown table."""
    from tabulate import tabulate

    return tabulate([(row.part, row.check, row.result, row.detail) for row in rows],
                    headers=['part', 'check', 'result', 'detail'], tablefmt='github')


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return 'not installed'


def machine() -> dict[str, Any]:
    """The device, and the versions of what the check ran on."""
    import torch

    gpus = [torch.cuda.get_device_name(k) for k in range(torch.cuda.device_count())]
    return {'gpus': gpus, 'python': platform.python_version(), 'torch': torch.__version__,
            'cuda': torch.version.cuda, 'numpy': _version('numpy'), 'composer': _version('mosaicml'),
            'composer_sampling': _version('composer-sampling'), 'platform': platform.platform(),
            'executable': sys.executable}


def write_result(folder: Path, rows: list[Row], about: dict[str, Any]) -> tuple[Path, Path]:
    """Write ``check_gpu.json`` (the machine, the settings, every row, whether it passed) and ``check_gpu.md``
    (the same table as printed) into ``folder``; return both paths."""
    folder.mkdir(parents=True, exist_ok=True)
    result = {**about, 'passed': not failed(rows), 'rows': [asdict(row) for row in rows]}
    json_path, table_path = folder / 'check_gpu.json', folder / 'check_gpu.md'
    json_path.write_text(json.dumps(result, indent=2, default=str) + '\n')
    gpus = ', '.join(about.get('machine', {}).get('gpus', [])) or 'no GPU'
    table_path.write_text(f'{gpus}; {about.get("summary", "")}\n\n{render(rows)}\n')
    return json_path, table_path
