"""Every refusal ``train`` makes anywhere in the suite is made by ``plan`` too, with the same message.

``plan`` and ``train`` run one pass of checks (``prepare`` in
``composer_sampling/recipes/build_training.py``). :func:`install` holds the suite to
it: it wraps ``composer_sampling.recipes.runner.main``, which both
``composer-sampling train`` and ``python -m composer_sampling.train`` run, before any
test module imports it. Whenever a test's ``train`` exits 2, ``composer-sampling plan``
runs on the same recipe and overrides, in the same process and environment (for the
world size of the launch the process belongs to), and must
exit 2 with the same message, unless the refusal is one that ``train`` alone makes
(:data:`TRAIN_ONLY`, the list docs/recipes.md gives). So every refusal test, written
now or later, is also a test that ``plan`` refuses alike.

Example:
    >>> train_only("error: model: support.user_parts:raising_model raised RuntimeError: out of memory")
    True
    >>> train_only("error: model.name: 'resnet' is not a registered model; choose one of: mlp")
    False
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from collections.abc import Callable

__all__ = ['TRAIN_ONLY', 'install', 'train_only']

#: The refusals ``train`` alone makes (docs/recipes.md, "When a recipe is checked"), as patterns of its message.
TRAIN_ONLY = (
    # this machine's hardware: run_fields.machine_device
    re.compile(r'^error: device=(gpu|mps), but (torch sees no CUDA GPU|this machine has no Apple MPS device)'),
    re.compile(r'^error: \w+(=\w+)? ?.*cannot train on device=auto \(this machine: '),
    re.compile(r'^error: precision=amp_bf16 on device=\w+: this GPU does not support bfloat16'),
    re.compile(r"^error: precision=amp_fp8 needs NVIDIA's transformer_engine"),
    # this machine's temporary folder, where train alone puts the checked copies Composer loads
    re.compile(r'^error: the checked copy of each checkpoint goes into the temporary folder '),
    # what only calling the builders of the model, the optimizer and Composer's parts shows
    re.compile(r'^error: (model|optimizer|scheduler|schedulers\[\d+\]|(callbacks|loggers|algorithms)\.[^:]+): '
               r'(\S+ raised \w+|the builder returned|\S+ returned a )'),
    re.compile(r'^error: \S+: the checkpoint .* (holds .* of shape .*, the model \(|\(model: )'),  # its shapes,
    # against the model built
)


def train_only(message: str) -> bool:
    """Whether ``message`` (train's, from ``error:``) is one of the refusals ``train`` alone makes."""
    return any(pattern.search(message) for pattern in TRAIN_ONLY)


def _parity_checked(train_main: Callable[[list[str] | None], int]) -> Callable[[list[str] | None], int]:
    def main(argv: list[str] | None = None) -> int:
        from composer_sampling.recipes.cli import main as cli_main

        arguments = list(sys.argv[1:] if argv is None else argv)
        refusal = io.StringIO()
        with contextlib.redirect_stderr(refusal):
            code = train_main(argv)
        sys.stderr.write(refusal.getvalue())
        message = refusal.getvalue()
        if code != 2 or not message.startswith('error: ') or train_only(message):
            return code
        planned = io.StringIO()
        world_size = ['--world-size', os.environ.get('WORLD_SIZE', '1')]  # a rank of a launch: plan for its world
        with contextlib.redirect_stderr(planned), contextlib.redirect_stdout(io.StringIO()):
            plan_code = cli_main(['plan', *arguments, *world_size])
        assert (plan_code, planned.getvalue()) == (2, message), (
            f'train refused {arguments} with {message!r}, but plan exited {plan_code} with {planned.getvalue()!r}; '
            'both run one pass of checks (or add the refusal to TRAIN_ONLY and docs/recipes.md)')
        return code

    main.__doc__ = train_main.__doc__
    main.__wrapped__ = train_main  # type: ignore[attr-defined]
    return main


def install() -> None:
    """Wrap the runner's ``main`` (and its alias ``composer_sampling.train.main``) once, before tests import it."""
    import composer_sampling.train
    from composer_sampling.recipes import runner

    if hasattr(runner.main, '__wrapped__'):
        return
    runner.main = composer_sampling.train.main = _parity_checked(runner.main)  # type: ignore[assignment]
