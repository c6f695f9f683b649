"""The package as a user installs it: a wheel built from the checkout, installed into a fresh virtual environment.

The fresh environment borrows the test environment's third-party packages (torch,
Composer, ...) through a path file instead of downloading them again, but not its
editable install of this package: every ``composer_sampling`` import below comes
from the wheel, and every command runs outside the checkout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.launcher  # under pytest -n, on one worker (tests/conftest.py's SHARED_RESOURCES)


@pytest.fixture(scope='module')
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp('wheel')
    subprocess.run([sys.executable, '-m', 'pip', 'wheel', '--quiet', '--no-deps', '-w', str(out), str(ROOT)],
                   check=True, capture_output=True, text=True, timeout=600)
    (built,) = out.glob('composer_sampling-*.whl')
    return built


@pytest.fixture(scope='module')
def fresh_env(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = tmp_path_factory.mktemp('env')
    venv.EnvBuilder(with_pip=False).create(env)
    purelib = Path(sysconfig.get_paths(vars={'base': str(env), 'platbase': str(env)})['purelib'])
    # A plain path line: the borrowed folder's own .pth files (our editable install among them) are not run.
    (purelib / 'borrowed.pth').write_text(sysconfig.get_paths()['purelib'] + '\n')
    # Without the checkout on PYTHONPATH: pip would take its composer_sampling.egg-info for an installed copy of the
    # same version and skip the wheel ("already installed with the same version as the provided wheel").
    subprocess.run([sys.executable, '-m', 'pip', '--python', str(env / 'bin' / 'python'), 'install', '--quiet',
                    '--no-deps', str(wheel)], check=True, capture_output=True, text=True, timeout=300,
                   env=_outside_the_checkout())
    return env


def _outside_the_checkout() -> dict[str, str]:
    """This process's environment without PYTHONPATH (the checkout) and the rank variables."""
    environment = {k: v for k, v in os.environ.items()
                   if k not in ('PYTHONPATH', 'WORLD_SIZE', 'RANK', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE')}
    environment['PYTHONWARNINGS'] = 'ignore'
    return environment


def _run(env: Path, args: list[str], cwd: Path, timeout: int = 400) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=_outside_the_checkout(), capture_output=True, text=True, timeout=timeout)


def test_the_wheel_ships_the_recipes_the_docs_and_the_license_but_no_tests(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    recipes = {Path(name).name for name in names if name.startswith('composer_sampling/recipes/yamls/')}
    assert {'digits.yaml', 'mixture.yaml', 'sub-epoch.yaml'} <= recipes
    pages = {Path(name).name for name in names if name.startswith('composer_sampling/docs/')}
    assert pages == {path.name for path in (ROOT / 'docs').glob('*.md')}  # what composer-sampling docs prints
    assert any(name.endswith('licenses/LICENSE') for name in names)
    assert not any(name.startswith(('tests/', 'scripts/', 'examples/')) for name in names)
    metadata = next(name for name in names if name.endswith('METADATA'))
    assert 'License-Expression: Apache-2.0' in zipfile.ZipFile(wheel).read(metadata).decode()


def test_a_recipe_trains_from_the_installed_wheel(fresh_env: Path, tmp_path: Path) -> None:
    python, command = fresh_env / 'bin' / 'python', fresh_env / 'bin' / 'composer-sampling'
    where = _run(fresh_env, [str(python), '-c', 'import composer_sampling; print(composer_sampling.__file__)'],
                 tmp_path)
    assert str(fresh_env) in where.stdout, where.stdout + where.stderr  # the wheel's copy, not the checkout's
    copied = _run(fresh_env, [str(command), 'recipes', 'digits', '--to', str(tmp_path)], tmp_path)
    assert copied.returncode == 0, copied.stderr
    assert (tmp_path / 'digits.yaml').is_file()
    page = _run(fresh_env, [str(command), 'docs', 'resume'], tmp_path)
    assert page.returncode == 0 and page.stdout == (ROOT / 'docs' / 'resume.md').read_text(), page.stderr
    refused = _run(fresh_env, [str(command), 'train', 'digits.yaml', 'seed=-1'], tmp_path)
    assert refused.returncode == 2 and 'error: seed must be in the interval' in refused.stderr, refused.stderr
    # The module the launcher runs on every rank (composer -n N -m composer_sampling.train), here on one rank: the
    # launcher itself is tested from the checkout (tests/neighbours/test_launcher.py).
    trained = _run(fresh_env, [str(python), '-m', 'composer_sampling.train', 'digits.yaml', 'max_duration=1ep'],
                   tmp_path)
    assert trained.returncode == 0, trained.stdout + trained.stderr
    assert 'world size          1' in trained.stdout
    assert 'held-out after 1 epochs: MulticlassAccuracy' in trained.stdout
    planned = _run(fresh_env, [str(command), 'plan', 'digits.yaml', '--world-size', '1024',
                               'global_train_batch_size=1024'], tmp_path)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert planned.stdout.rstrip().splitlines()[-1].startswith('every guarantee holds')
