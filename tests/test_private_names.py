"""No private name crosses a module boundary inside the package.

ruff's PLC2701 (enabled in pyproject.toml) refuses private imports from other packages
but exempts a package's imports from itself; this test holds the line inside
``composer_sampling``: no ``from composer_sampling.x import _name`` (relative imports
included) and no ``x._name`` on a module of the package, from any other module.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / 'composer_sampling'


def _private(name: str) -> bool:
    return name.startswith('_') and not name.startswith('__')


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix('').parts
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ''
    parts = module.split('.') if is_package else module.split('.')[:-1]
    parts = parts[:len(parts) - (node.level - 1)]
    return '.'.join([*parts, node.module] if node.module else parts)


def crossings(source: str, module: str, is_package: bool = False) -> list[str]:
    """Private names that ``source`` (the text of ``module``) takes from other modules of the package."""
    tree = ast.parse(source)
    found, package_modules = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            origin = _absolute(node, module, is_package)
            if origin.split('.')[0] != 'composer_sampling' or origin == module:
                continue
            for alias in node.names:
                if _private(alias.name):
                    found.append(f'{module}:{node.lineno} imports {alias.name} from {origin}')
                else:
                    package_modules.add(alias.asname or alias.name)  # maybe a module: its attributes are checked
        elif isinstance(node, ast.Import):
            package_modules.update(alias.asname or alias.name for alias in node.names
                                   if alias.name.split('.')[0] == 'composer_sampling' and alias.name != module)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name)
                and node.value.id in package_modules):
            found.append(f'{module}:{node.lineno} reads {node.value.id}.{node.attr}')
    return found


def test_the_scanner_sees_both_kinds_of_crossing() -> None:
    source = ('from composer_sampling.positions import _CHUNK, chunk_bounds\n'
              'from ..permutation import _round_keys\n'
              'from . import permutation\n'
              'from composer_sampling.samplers.mixture import _READ_AHEAD\n'
              'permutation._cycle_walk\n')
    assert crossings(source, 'composer_sampling.samplers.mixture') == [
        'composer_sampling.samplers.mixture:1 imports _CHUNK from composer_sampling.positions',
        'composer_sampling.samplers.mixture:2 imports _round_keys from composer_sampling.permutation',
        'composer_sampling.samplers.mixture:5 reads permutation._cycle_walk',
    ]


def test_no_private_name_crosses_a_module_boundary() -> None:
    found = []
    for path in sorted(PACKAGE.rglob('*.py')):
        found += crossings(path.read_text(encoding='utf-8'), _module_name(path), path.name == '__init__.py')
    assert not found, '\n'.join(found)
