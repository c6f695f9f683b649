"""Collection without Composer, for every test path (``tests/`` and the doctests of ``composer_sampling/``).

``make test-lightning`` runs the suite where Composer is not installed: the order core,
the Lightning tests and the Hugging Face tests. There a test module or doctest module
that needs Composer is skipped, and said so in the summary, instead of failing its
collection. The Hugging Face adapter and its tests are collected only where the
transformers it is tested on is installed (the ``transformers`` extra's range): the
environments of Composer hold older ones, which llm-foundry and Composer pull in, and
importing them at every collection would cost each test process seconds for tests it
deselects.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

#: Whether Composer is installed.
COMPOSER = importlib.util.find_spec('composer') is not None
#: The transformers releases the Hugging Face adapter is tested on (the ``transformers`` extra's pin), as
#: ``(major, minor)``.
TESTED_TRANSFORMERS = (5, 25)
#: The folders that hold the Hugging Face adapter and its tests, and the tests' helpers (collected for their
#: doctests).
_HUGGING_FACE = tuple(Path(__file__).parent / folder for folder in (
    'composer_sampling/transformers', 'tests/transformers', 'tests/support/transformers_parts.py'))


def _tested_transformers_installed() -> bool:
    """Whether the transformers installed is of the releases the adapter is tested on (read without importing
    it)."""
    try:
        release = importlib.metadata.version('transformers')
    except importlib.metadata.PackageNotFoundError:
        return False
    return tuple(int(part) for part in re.findall(r'\d+', release)[:2]) == TESTED_TRANSFORMERS


HUGGING_FACE_TESTED = _tested_transformers_installed()


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Where the transformers installed is not the one the adapter is tested on, its modules and tests are not
    collected."""
    if not HUGGING_FACE_TESTED and any(collection_path == folder or folder in collection_path.parents
                                       for folder in _HUGGING_FACE):
        return True
    return None


#: A collection error that means "this needs Composer, which is not installed": a module it cannot import, or the
#: package's own ImportError naming the composer extra.
_WITHOUT_COMPOSER = re.compile(r"No module named '(composer|omegaconf|tabulate|llmfoundry|streaming|sklearn|boto3|"
                               r"matplotlib)'|needs composer")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    """Without Composer, a module that needs it is skipped instead of failing its collection."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if COMPOSER or not report.failed or not _WITHOUT_COMPOSER.search(str(report.longrepr)):
        return
    report.outcome = 'skipped'
    report.longrepr = (str(collector.path), 0, 'Skipped: needs Composer, which this environment does not have')
