"""Select tests by world size, as Composer's own suite does.

A test marked ``world_size(n)`` runs only inside a process that is one of ``n``
ranks started by the ``composer`` launcher (``composer -n n -m pytest tests/dist``);
every other test runs only in a plain single process.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).parent))

# Property tests check invariants, not speed: no per-example deadline, so a loaded CI machine cannot fail them.
settings.register_profile('composer-sampling', deadline=None)
settings.load_profile('composer-sampling')


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    world_size = int(os.environ.get('WORLD_SIZE', '1'))
    for item in items:
        marker = item.get_closest_marker('world_size')
        wanted = marker.args[0] if marker else 1
        if wanted != world_size:
            item.add_marker(pytest.mark.skip(reason=f'needs world size {wanted}; this process is one of {world_size}'))
