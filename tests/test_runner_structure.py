"""The recipe runner's shape: floors imported only downwards, a recipe refused at the first floor that refuses it, no
registered name in its code.

A recipe goes down the floors once (YAML, spec, checks, data, training, commands);
a floor imports only floors below it, so no builder can ask the schema again, and a
recipe that a floor refuses is refused there, before any floor above it builds a
part. What a registered part needs is metadata on its registry entry, never a name
compared in the runner's code.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from composer_sampling.recipes.cli import main
from composer_sampling.recipes.registry import REGISTRIES

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ROOT / 'composer_sampling' / 'recipes'
#: Each runner module and its floor: it may import runner modules of lower floors only.
FLOORS = {
    'errors': 0, 'composer_names': 0, 'durations': 1, 'run_fields': 1, 'schema': 2, 'registry': 3,
    'resolve': 4, 'folders': 5, 'checkpoints': 5, 'builders': 5, 'checks': 6, 'logger_paths': 6,
    'autoresume': 7, 'remote_folders': 6, 'build_data': 7, 'build_composer_parts': 7, 'build_training': 8,
    'runner': 9, 'cli': 10,
}


def _runner_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith('composer_sampling.recipes.'):
            names.add(node.module.split('.')[2])
        elif isinstance(node, ast.Import):
            names.update(alias.name.split('.')[2] for alias in node.names
                         if alias.name.startswith('composer_sampling.recipes.'))
    return names


def test_every_runner_module_has_a_floor() -> None:
    modules = {path.stem for path in RUNNER.glob('*.py')} - {'__init__', 'builtin_parts'}
    assert modules == set(FLOORS)


def test_floors_import_only_floors_below_them() -> None:
    for module, floor in FLOORS.items():
        for imported in _runner_imports(RUNNER / f'{module}.py') - {'demo'}:
            assert FLOORS[imported] < floor, f'{module} (floor {floor}) imports {imported} (floor {FLOORS[imported]})'


def test_the_builtin_parts_import_no_runner_module() -> None:
    assert _runner_imports(RUNNER / 'builtin_parts.py') <= {'demo'}


#: A train dataset whose builder fails, as a user's does when its data is not where it looks: a refusal that names
#: another field came before the data floor built the dataset.
_FAILING_DATASET = 'train_loader.dataset={target: "support.user_parts:failing", kwargs: {size: 10}}'


@pytest.mark.parametrize(('override', 'refusal'), [
    ('seed=-1', 'seed must be in the interval'),  # the schema
    ('train_loader.sampler.drop_last=maybe', 'train_loader.sampler.drop_last must be true or false'),  # a part
    ('optimizer.lr=0', 'optimizer.lr must be a number in (0, inf), got 0'),  # another registry's part
    ('callbacks.sample_ledger={}', 'callbacks.sample_ledger writes to {save_folder}/ledger: set save_folder'),  # checks
    ('seed=3', 'train_loader.dataset: support.user_parts:failing raised ValueError'),  # the data floor itself
], ids=lambda value: str(value)[:30])
def test_a_recipe_is_refused_at_the_first_floor_that_refuses_it(override: str, refusal: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    code = main(['plan', str(ROOT / 'yamls' / 'digits.yaml'), _FAILING_DATASET, override])
    err = capsys.readouterr().err
    assert (code, err.startswith(f'error: {refusal}')) == (2, True), err


def test_no_runner_code_compares_a_registered_name() -> None:
    names = {name for registry in REGISTRIES.values() for name in registry.names()}
    for module in FLOORS:
        for node in ast.walk(ast.parse((RUNNER / f'{module}.py').read_text())):
            if not isinstance(node, ast.Compare):
                continue
            for side in [node.left, *node.comparators]:
                constants = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                for constant in constants:
                    if isinstance(constant, ast.Constant) and constant.value in names:
                        raise AssertionError(f'{module}.py line {node.lineno} compares the registered name '
                                             f'{constant.value!r}')
