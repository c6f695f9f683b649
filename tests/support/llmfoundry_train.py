"""Train llm-foundry YAMLs one after another with llm-foundry's own ``train_from_yaml`` (for test_llmfoundry.py).

    composer -n 2 tests/support/llmfoundry_train.py RUN.yaml [RUN.yaml ...]

A YAML may name the callback ``die_while_saving`` (``{batch: N, folder: SAVE_FOLDER}``), registered here: rank 0
is killed while Composer saves the checkpoint of batch ``N``, as ``fault_train.py`` kills a recipe run.
"""

from __future__ import annotations

import os
import sys
from typing import Any

os.environ.setdefault('HF_HUB_OFFLINE', '1')
os.environ.setdefault('HF_DATASETS_OFFLINE', '1')


def _die_while_saving() -> Any:
    """The callback class ``die_while_saving``: a SIGKILL at the save of one batch."""
    from composer.core import Callback, State
    from composer.loggers import Logger
    from composer.utils import dist

    class DieWhileSaving(Callback):
        def __init__(self, batch: int, folder: str) -> None:
            self.batch, self.folder = batch, folder

        def batch_checkpoint(self, state: State, logger: Logger) -> None:
            if dist.get_global_rank() == 0 and int(state.timestamp.batch) == self.batch:
                from fault_train import die_while_saving  # the recipe runner's imports, only for the kill

                die_while_saving(state, self.folder)

    return DieWhileSaving


def main(paths: list[str]) -> None:
    from llmfoundry.command_utils import train_from_yaml
    from llmfoundry.registry import callbacks

    callbacks.register('die_while_saving', func=_die_while_saving())
    for path in paths:
        train_from_yaml(path).close()


if __name__ == '__main__':
    main(sys.argv[1:])
