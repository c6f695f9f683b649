"""The ``composer-sampling`` command where Lightning users install the package: no Composer, omegaconf or tabulate.

Each command runs as ``python -m composer_sampling`` in a fresh interpreter where
those modules cannot be imported (set to ``None`` in ``sys.modules``, as when they are
not installed), so the tests hold in the test environment that has them too; ``make
test-lightning`` runs them where they are truly absent. ``audit`` reads ledgers
written here by ``LedgerWriter``, and its output is the one the command printed
before it stopped depending on tabulate, byte for byte.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from composer_sampling.ledger_format import LedgerWriter

from support.command_runs import RESUMED_RUN_AUDIT, ROOT, command, environment, write_resumed_run


def test_audit_runs_without_composer(tmp_path: Path) -> None:
    """Its output is what the command printed with tabulate (the same run audited by the code before this test)."""
    done = command('audit', str(write_resumed_run(tmp_path / 'run' / 'ledger').parent))
    assert (done.returncode, done.stderr) == (0, ''), done.stderr
    assert done.stdout == RESUMED_RUN_AUDIT


def test_audit_of_the_version_3_fixture_and_a_violation(tmp_path: Path) -> None:
    shutil.copytree(ROOT / 'tests' / 'fixtures' / 'ledger-v3', tmp_path / 'v3')
    done = command('audit', str(tmp_path / 'v3'))
    assert (done.returncode, done.stderr) == (0, ''), done.stderr
    assert done.stdout.endswith('|       0 |        12 |             12 |          0 |         0 | ok       |\n'
                                '|       1 |        12 |             12 |          0 |         0 | ok       |\n'
                                '\ndataset length 12\n'), done.stdout
    header = dict(lineage='one', attempt='a1', resumed_from=None, started=1.0, rank=0, world_size=1, start_batch=0,
                  start_epoch=0, dataset_len=4, padded=0, dropped=0, sub_epochs_per_epoch=1)
    writer = LedgerWriter(tmp_path / 'broken' / 'a1-rank0.bin', header)
    writer.append(0, 1, [0, 1, 1, 2])  # 1 twice, 3 never
    writer.close()
    done = command('audit', str(tmp_path / 'broken'))
    assert done.returncode == 1
    assert done.stderr == 'FAILED guarantee: exactly once per epoch: epoch 0 repeats 1 and misses 1 samples\n'
    assert '|       0 |         4 |              2 |          1 |         1 | VIOLATION |' in done.stdout
    done = command('audit', str(tmp_path / 'nothing-here'))
    assert (done.returncode, done.stdout) == (2, '')
    assert done.stderr.startswith(f'error: {tmp_path / "nothing-here"} is not a folder'), done.stderr


def test_docs_runs_without_composer() -> None:
    listed = command('docs')
    assert (listed.returncode, listed.stderr) == (0, ''), listed.stderr
    assert {line.split()[0] for line in listed.stdout.split('\n\n')[0].splitlines()} == {
        path.stem for path in (ROOT / 'docs').glob('*.md')}
    page = command('docs', 'plan-and-audit')
    assert (page.returncode, page.stdout) == (0, (ROOT / 'docs' / 'plan-and-audit.md').read_text())
    missing = command('docs', 'tutorial')
    assert missing.returncode == 2 and \
        missing.stderr.startswith("error: no page 'tutorial'; choose one of: data-order, layout, ")
    assert len(missing.stderr.splitlines()) == 1


@pytest.mark.parametrize('args', [['train', 'yamls/digits.yaml'], ['plan', 'yamls/digits.yaml', '--world-size', '8'],
                                  ['recipes'], ['--verbose', 'train', 'no-such-recipe.yaml', 'seed=3']])
def test_the_recipe_commands_name_the_extra_they_need(args: list[str]) -> None:
    done = command(*args)
    assert (done.returncode, done.stdout) == (2, '')
    assert done.stderr == (f'error: composer-sampling {args[args[0] == "--verbose"]} needs composer, omegaconf, '
                           "tabulate (not installed): pip install 'composer-sampling[composer]'\n")


@pytest.mark.parametrize('args', [['--help'], ['train', '--help'], ['plan', '--help'], ['audit', '--help'],
                                  ['recipes', '--help'], ['docs', '--help']])
def test_help_works_without_composer(args: list[str]) -> None:
    done = command(*args)
    assert (done.returncode, done.stderr) == (0, ''), done.stderr
    assert done.stdout.startswith(f'usage: composer-sampling {" ".join(args[:-1])}'.rstrip())


def test_the_console_script_is_the_entry_point_that_needs_no_composer() -> None:
    tomllib = pytest.importorskip('tomllib')  # Python 3.11 and later
    scripts = tomllib.loads((ROOT / 'pyproject.toml').read_text())['project']['scripts']
    assert scripts == {'composer-sampling': 'composer_sampling.__main__:main'}
    probe = ('import sys\nfor name in ("composer", "omegaconf", "tabulate"):\n    sys.modules[name] = None\n'
             'from composer_sampling.__main__ import main\nsys.exit(main(["docs", "resume"]))')
    done = subprocess.run([sys.executable, '-c', probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=environment())
    assert (done.returncode, done.stderr) == (0, '') and done.stdout == (ROOT / 'docs' / 'resume.md').read_text()
