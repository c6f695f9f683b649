"""The import graph of the package has no cycle: every import counts, at module level or inside a function.

The graph is read from the source with :mod:`ast`, so nothing is imported. An edge
goes from a module to every module of the package that it imports: ``import a.b``
and ``from a.b import c`` name ``a.b`` (and ``a.b.c`` when that is a module), and
a relative import is resolved against the importing module's package. Imports under
``if TYPE_CHECKING:`` count as well, since a cycle there still ties the modules together
for a reader.
"""

from __future__ import annotations

import ast
from pathlib import Path

import composer_sampling

PACKAGE = Path(composer_sampling.__file__).parent
ROOT = PACKAGE.name


def _module_names() -> dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob('*.py'):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix('').parts)
        if parts[-1] == '__init__':
            parts.pop()
        names['.'.join(parts)] = path
    return names


def _imported(module: str, path: Path, known: set[str]) -> set[str]:
    package = module if path.name == '__init__.py' else module.rpartition('.')[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                anchor = package.split('.')[:len(package.split('.')) - node.level + 1]
                base = '.'.join([*anchor, *([base] if base else [])])
            targets = [base, *(f'{base}.{alias.name}' for alias in node.names)]
        else:
            continue
        found.update(target for target in targets if target in known and target != module)
    return found


def import_graph() -> dict[str, set[str]]:
    """Every module of the package and the modules of the package it imports."""
    names = _module_names()
    return {module: _imported(module, path, set(names)) for module, path in names.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as the list of its modules, the first repeated at the end; None if there is none."""
    state: dict[str, int] = {}  # 1 while on the current path, 2 when finished
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return [*path[path.index(target):], target]
            if target not in state and (cycle := visit(target)) is not None:
                return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)) is not None:
            return cycle
    return None


def test_the_graph_reader_sees_every_kind_of_import() -> None:
    graph = import_graph()
    assert 'composer_sampling.samplers.distribute' in graph['composer_sampling.recipes.builtin_parts']
    assert 'composer_sampling.samplers.nested' in graph['composer_sampling.samplers.distribute']
    assert len(graph) > 50


def test_find_cycle_finds_a_cycle_through_a_function_level_import() -> None:
    assert find_cycle({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': set()}) == ['a', 'b', 'c', 'a']
    assert find_cycle({'a': {'b'}, 'b': set()}) is None


def test_the_package_has_no_import_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, f'import cycle: {" -> ".join(cycle or [])}'


def _third_party_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split('.')[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split('.')[0])
    return found


def test_only_the_recipe_runner_imports_omegaconf_and_tabulate() -> None:
    """The runner is a layer over the library: the core, the callbacks and the proofs need neither."""
    outside = sorted(f'{module} imports {name}' for module, path in _module_names().items()
                     if not module.startswith(f'{ROOT}.recipes') for name in _third_party_imports(path)
                     if name in ('omegaconf', 'tabulate'))
    assert not outside, outside
    inside = set().union(*(_third_party_imports(path) for module, path in _module_names().items()
                          if module.startswith(f'{ROOT}.recipes')))
    assert {'omegaconf', 'tabulate'} <= inside  # the check reads real imports
