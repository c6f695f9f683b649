"""The adapters only map their trainer's events onto DataOrder: their public attributes are their arguments, and
deciding, applying and reading the resume live in the order core (DataOrder, _resume/)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / 'composer_sampling'
SAMPLER_SYNC = PACKAGE / 'callbacks' / 'sampler_sync.py'
LIGHTNING_SYNC = PACKAGE / 'lightning' / 'sampler_sync.py'


def _names(target: ast.expr) -> list[ast.expr]:
    """The single targets of an assignment target, tuples and starred targets unpacked."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for element in target.elts for name in _names(element)]
    return _names(target.value) if isinstance(target, ast.Starred) else [target]


def instance_attributes(source: str, class_name: str) -> set[str]:
    """The attributes the methods of ``class_name`` set on ``self`` (``self.x = ...``, ``self.x: T = ...``, tuples)."""
    (cls,) = [node for node in ast.walk(ast.parse(source))
              if isinstance(node, ast.ClassDef) and node.name == class_name]
    found = set()
    for method in cls.body:
        if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) or not method.args.args:
            continue
        this = method.args.args[0].arg
        for node in ast.walk(method):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
            for target in targets:
                for item in _names(target):
                    if isinstance(item, ast.Attribute) and isinstance(item.value, ast.Name) and item.value.id == this:
                        found.add(item.attr)
    return found


def test_the_scanner_sees_every_kind_of_assignment() -> None:
    source = ('class A:\n'
              '    def __init__(self):\n        self.a = 1\n        self.b: int = 2\n'
              '    def m(me):\n        me.c, (me.d, *me.g) = 3, (4, 5)\n        me.a += 1\n        me.e.f = 5\n')
    assert instance_attributes(source, 'A') == {'a', 'b', 'c', 'd', 'g'}


def test_each_sampler_sync_holds_its_arguments_as_its_public_attributes() -> None:
    from composer_sampling.callbacks.sampler_sync import SamplerSync

    found = instance_attributes(SAMPLER_SYNC.read_text(), 'SamplerSync')
    arguments = set(inspect.signature(SamplerSync).parameters)
    public = {name for name in found if not name.startswith('_')}
    assert public == arguments, 'every public attribute is an argument of the same name, as in Composer'


def test_the_adapters_map_events_onto_the_order_core() -> None:
    for module in (SAMPLER_SYNC, LIGHTNING_SYNC):
        imported = {node.module for node in ast.walk(ast.parse(module.read_text()))
                    if isinstance(node, ast.ImportFrom) and node.module}
        assert 'composer_sampling.data_order' in imported, module
        for inner in ('composer_sampling._graph.index_tap', 'composer_sampling._checkpoint.envelope',
                      'composer_sampling._graph.signatures', 'composer_sampling._resume.seeds',
                      'composer_sampling._resume.data_identity', 'composer_sampling._resume.decide'):
            assert inner not in imported, f'{module.name} imports {inner}, which DataOrder uses for it'
