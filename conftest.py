"""Collection without Composer, for every test path (``tests/`` and the doctests of ``composer_sampling/``).

``make test-lightning`` runs the suite where Composer is not installed: the order core
and the Lightning tests. There a test module or doctest module that needs Composer is
skipped, and said so in the summary, instead of failing its collection.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator

import pytest

#: Whether Composer is installed.
COMPOSER = importlib.util.find_spec('composer') is not None


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
