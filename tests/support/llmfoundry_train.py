"""Train llm-foundry YAMLs one after another with llm-foundry's own ``train_from_yaml`` (for test_llmfoundry.py).

    composer -n 2 tests/support/llmfoundry_train.py RUN.yaml [RUN.yaml ...]
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault('HF_HUB_OFFLINE', '1')
os.environ.setdefault('HF_DATASETS_OFFLINE', '1')


def main(paths: list[str]) -> None:
    from llmfoundry.command_utils import train_from_yaml

    for path in paths:
        train_from_yaml(path).close()


if __name__ == '__main__':
    main(sys.argv[1:])
