"""Select tests by world size, as Composer's own suite does.

A test marked ``world_size(n)`` runs only inside a process that is one of ``n``
ranks started by the ``composer`` launcher (``composer -n n -m pytest tests/dist``);
every other test runs only in a plain single process.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# One intra-op thread a process, set before anything imports torch: ``make test`` runs two pytest-xdist workers (and
# the ranks each launches) on two cores, where torch's default of a thread per core made every process wait on the
# others' threads. Measured on 2 cores, the tests not marked launcher, llmfoundry or s3: one process 362 s; two
# workers 254 s; two workers with one thread each 196 s. The launcher, llm-foundry and S3 tiers in two workers went
# from 552-645 s to 502 s. The launched ranks inherit it. A value set by the caller is kept.
os.environ.setdefault('OMP_NUM_THREADS', '1')

import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).parent))  # tests/: the helpers import as the package ``support``

from support.s3_server import S3Server, loopback_environment

#: Whether Composer is installed: the environment of the Lightning tests (make test-lightning) has none, and runs only
#: the tests that need no Composer (``pytest_ignore_collect`` below).
COMPOSER = importlib.util.find_spec('composer') is not None

if COMPOSER:
    from support.plan_parity import install as install_plan_parity

    install_plan_parity()  # every train refusal of the suite is checked against plan's (support/plan_parity.py)

# Property tests check invariants, not speed: no per-example deadline, so a loaded CI machine cannot fail them.
settings.register_profile('composer-sampling', deadline=None)
settings.load_profile('composer-sampling')


ROOT = Path(__file__).resolve().parent.parent


def _repository_status() -> set[str] | None:
    """The untracked files of the checkout the tests run from (``git status``), or None outside a git checkout."""
    try:
        top = subprocess.run(['git', 'rev-parse', '--show-toplevel'], cwd=ROOT, capture_output=True, text=True,
                             timeout=60)
        if top.returncode != 0 or Path(top.stdout.strip()).resolve() != ROOT:
            return None  # an installed wheel's tests, or a copy inside another repository
        status = subprocess.run(['git', 'status', '--porcelain', '--untracked-files=all'], cwd=ROOT,
                                capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return {line[3:] for line in status.stdout.splitlines() if line.startswith('?? ')}  # new files, not edits


@pytest.fixture(scope='session', autouse=True)
def _tests_leave_the_repository_as_it_was() -> Iterator[None]:
    """A test writes into tmp_path only: the session fails naming any file it left in the repository."""
    before = _repository_status()
    yield
    after = _repository_status() if before is not None else None
    if before is not None and after is not None and after - before:
        pytest.fail(f'the tests left new files in the repository (write into tmp_path): {sorted(after - before)}',
                    pytrace=False)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    world_size = int(os.environ.get('WORLD_SIZE', '1'))
    for item in items:
        marker = item.get_closest_marker('world_size')
        wanted = marker.args[0] if marker else 1
        if wanted != world_size:
            item.add_marker(pytest.mark.skip(reason=f'needs world size {wanted}; this process is one of {world_size}'))
    # The slowest tests first, so that under ``pytest -n`` (make test) the long launches start at once and the many
    # short tests fill the workers around them instead of one launch running alone at the end.
    items.sort(key=_expected_cost_rank)


#: Tests that share one resource of the machine, by node-id prefix: under ``pytest -n`` (make test) each group runs on
#: one worker, one test after another; every other test is a group of its own.
SHARED_RESOURCES = {
    # mosaicml-streaming ``StreamingDataset``s, built in the pytest process or in the ranks a test launches: each
    # registers a shared-memory prefix by taking the first ``NNNNNN_locals`` in /dev/shm that does not exist yet,
    # unlocked (streaming's ``get_shm_prefix``), so two processes doing so at once take the same one and one fails
    # (``FileExistsError: '/000807_locals'``).
    'streaming-shared-memory': ('tests/neighbours/test_streaming.py::', 'tests/resume/test_adoption.py::',
                                'tests/resume/test_stream_fingerprint.py::',
                                'tests/neighbours/test_llmfoundry.py::',
                                'tests/neighbours/test_launcher.py::test_two_rank_suite'),
    # pip builds the wheel in the checkout's build/ folder, which two builds at once would share.
    'wheel': ('tests/test_wheel.py::',),
    # launches of several ranks that choose their port before binding it (torchrun, Lightning's and Fabric's own
    # launchers): two at once may choose the same one, and a rank of one joins the other.
    'rank-launches': ('tests/lightning/test_docs_examples.py::', 'tests/lightning/test_launch.py::'),
    # the never-stopped two-rank run of tests/support/launched_runs.py, launched once per process for both
    'two-rank-synthetic': (
        'tests/neighbours/test_launcher.py::test_the_train_module_runs_under_the_launcher_and_from_the_command',
        'tests/ledger/test_ledger_upload.py::test_two_ranks_killed_after_a_checkpoint_autoresume_from_the_bucket',
    ),
}


def shared_resource(nodeid: str) -> str | None:
    """The name of the group in ``SHARED_RESOURCES`` that holds the test ``nodeid``, or None.

    Example:
        >>> shared_resource('tests/test_wheel.py::test_a_recipe_trains_from_the_installed_wheel')
        'wheel'
        >>> shared_resource('tests/test_docs.py::test_every_relative_link_resolves') is None
        True
    """
    return next((name for name, prefixes in SHARED_RESOURCES.items() if nodeid.startswith(prefixes)), None)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadgroup``: the groups of ``SHARED_RESOURCES``, each test else on the next free worker.

    pytest-xdist's own ``loadgroup`` reads ``xdist_group`` marks by renaming the tests' node ids, which pytest 9.2
    no longer lets a plugin do: the marks are silently ignored there. This scheduler groups by node id instead.
    """
    if config.getvalue('dist') != 'loadgroup':
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedResourceScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return shared_resource(nodeid) or nodeid

    return SharedResourceScheduling(config, log)


def _expected_cost_rank(item: pytest.Item) -> int:
    """0 for a test that launches several ranks, 1 for the other slow tiers (llm-foundry, S3), 2 for the rest; the
    sort is stable, so each keeps its order of collection."""
    if item.get_closest_marker('launcher'):
        return 0
    return 1 if item.get_closest_marker('llmfoundry') or item.get_closest_marker('s3') else 2


_S3_STARTS: list[float] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say how long the S3 server took to start, when a test started it."""
    for seconds in _S3_STARTS:
        terminalreporter.write_line(f'SeaweedFS S3 server ready in {seconds:.1f} s')


@pytest.fixture(scope='session')
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One SeaweedFS S3 server on loopback for the whole run, started when a test first asks for it."""
    server = S3Server(tmp_path_factory.mktemp('seaweedfs'))
    server.start()
    _S3_STARTS.append(server.start_seconds)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A new empty bucket of the test S3 server, as ``s3://NAME``.

    For the test's duration ``S3_ENDPOINT_URL`` and the test keys are in ``os.environ`` (so Composer's
    ``S3ObjectStore`` and launched subprocesses reach the server), and the user's AWS files are shut out.
    """
    for name, value in loopback_environment(s3_server.endpoint_url, tmp_path_factory.getbasetemp()).items():
        monkeypatch.setenv(name, value)
    for name in ('AWS_PROFILE', 'AWS_SESSION_TOKEN', 'AWS_ENDPOINT_URL', 'AWS_ENDPOINT_URL_S3'):
        monkeypatch.delenv(name, raising=False)
    return s3_server.make_bucket()
