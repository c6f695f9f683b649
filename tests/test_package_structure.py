"""The package's shape: its folders and root modules on floors imported only downwards, each folder entered
through its interface.

A *unit* is a folder of ``composer_sampling`` (``_graph``, ``samplers``, ...) or a module
at its root (``permutation``, ``audit``, ...). A unit imports only units of lower floors,
so two units on one floor never import each other (nothing crosses sideways). Inside
the package a leading underscore means "this folder's own", at any depth: the folder
``_graph`` is the package's own (any module of the package may enter it), a module
``_proofs/_construction.py`` is ``_proofs``'s own (only ``_proofs`` imports it). So a
folder's interface is its modules without an underscore, which its ``__init__.py``
lists. Every import is counted: at the top, inside functions and under
``TYPE_CHECKING``. The floors inside ``recipes/`` are tests/test_runner_structure.py's.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / 'composer_sampling'

#: Each unit and its floor, measured: the order core and the leaf helpers, then checkpoints and the graph, the
#: samplers on them, the proofs and the resume decision on those, the audit, the order object and the ledger's
#: recording, the adapters and the command's parser with the subcommands that need no Composer, the runner, the
#: training module and the command's entry point (which reaches the runner's subcommands), the package's lazy front.
FLOORS = {
    'permutation': 0, '_requires': 0, '_fingerprint': 0, 'errors': 0,
    '_validate': 1, 'positions': 1, '_stores': 1,
    'protocols': 2, 'batching': 2, 'per_sample_rng': 2, '_checkpoint': 2,
    'ledger_format': 3, '_graph': 3,
    'samplers': 4,
    '_proofs': 5, '_resume': 5,
    'audit': 6, 'data_order': 6, '_ledger': 6,
    'callbacks': 7, 'lightning': 7, 'transformers': 7, '_cli': 7,
    'recipes': 8,
    'train': 9, '__main__': 9,
    '': 10,  # composer_sampling/__init__.py: the public names, imported lazily
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix('').parts
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


MODULES = {_module_name(path): path for path in PACKAGE.rglob('*.py')}


def _unit(module: str) -> str:
    parts = module.split('.')
    return parts[1] if len(parts) > 1 else ''


def imports(module: str) -> set[str]:
    """The package's modules (or packages) that ``module`` imports, wherever the import statement is."""
    path = MODULES[module]
    package = module.split('.') if path.name == '__init__.py' else module.split('.')[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding='utf-8'))):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            origin = '.'.join([*base, *([node.module] if node.module else [])])
            if origin.split('.')[0] == 'composer_sampling':
                found.update(f'{origin}.{alias.name}' if f'{origin}.{alias.name}' in MODULES else origin
                             for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split('.')[0] == 'composer_sampling')
    return found - {module}


def visible(target: str, importer: str) -> bool:
    """Whether ``importer`` may import ``target``: every underscored part of ``target`` belongs to a package that
    holds ``importer`` too."""
    importer_package = importer.split('.') if MODULES[importer].name == '__init__.py' else importer.split('.')[:-1]
    parts = target.split('.')
    return all(parts[:i] == importer_package[:i] for i, part in enumerate(parts) if part.startswith('_'))


def test_visibility_follows_the_underscores() -> None:
    assert visible('composer_sampling._graph.walk', 'composer_sampling.callbacks.sample_ledger')
    assert visible('composer_sampling._proofs._construction', 'composer_sampling._proofs.plan')
    assert not visible('composer_sampling._proofs._construction', 'composer_sampling.audit')
    assert not visible('composer_sampling.samplers._base', 'composer_sampling._proofs.plan')


def test_every_unit_has_a_floor() -> None:
    assert {_unit(module) for module in MODULES} == set(FLOORS)


def test_units_import_only_units_below_them() -> None:
    wrong = []
    for module in sorted(MODULES):
        unit = _unit(module)
        for target in sorted(imports(module)):
            other = _unit(target)
            if other != unit and FLOORS[other] >= FLOORS[unit]:
                wrong.append(f'{module} (floor {FLOORS[unit]}) imports {target} (floor {FLOORS[other]})')
    assert not wrong, '\n'.join(wrong)


def test_folders_are_entered_through_their_interface() -> None:
    wrong = [f'{module} imports {target}, which is its folder\'s own'
             for module in sorted(MODULES) for target in sorted(imports(module)) if not visible(target, module)]
    assert not wrong, '\n'.join(wrong)


def test_each_private_folder_lists_its_interface() -> None:
    for folder in sorted(path for path in PACKAGE.iterdir() if path.is_dir() and path.name.startswith('_')
                         and (path / '__init__.py').exists()):
        docstring = ast.get_docstring(ast.parse((folder / '__init__.py').read_text(encoding='utf-8'))) or ''
        for module in sorted(path.stem for path in folder.glob('*.py') if not path.stem.startswith('_')):
            assert f'``{module}``' in docstring, f'{folder.name}/__init__.py does not list {module}'
