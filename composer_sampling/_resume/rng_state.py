"""This process's random number generators as plain values: saved in a checkpoint, restored bit for bit.

Python's ``random``, NumPy's global generator, torch's CPU generator and, when CUDA
is initialised, every CUDA device's generator. The values are lists, numbers and
tensors only, so a checkpoint that holds them loads with ``torch.load(weights_only=True)``
(Lightning loads checkpoints that way).

Example:
    >>> import random
    >>> saved = capture()
    >>> first = random.random()
    >>> restore(saved)
    >>> random.random() == first
    True
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

__all__ = ['capture', 'check', 'restore']


def capture() -> dict[str, Any]:
    """The state of every generator of this process, as plain values."""
    version, internal, gauss = random.getstate()
    kind, keys, position, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        'python': [version, list(internal), gauss],
        'numpy': [str(kind), [int(key) for key in keys], int(position), int(has_gauss), float(cached)],
        'torch': torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state['cuda'] = list(torch.cuda.get_rng_state_all())
    return state


def restore(state: dict[str, Any]) -> None:
    """Set every generator :func:`capture` saved back to that state (CUDA only where it was saved, and is here)."""
    version, internal, gauss = state['python']
    random.setstate((int(version), tuple(int(item) for item in internal), gauss))
    kind, keys, position, has_gauss, cached = state['numpy']
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), position, has_gauss, cached))
    torch.set_rng_state(state['torch'])
    if state.get('cuda') and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state['cuda'])


def check(state: Any, name: str) -> None:
    """Refuse an RNG state that :func:`restore` could not set, naming it: tried on this process's generators, which
    are then set back as they were.

    Raises:
        ValueError: ``state`` is not a state :func:`capture` wrote; the message names ``name`` and the problem.

    Example:
        >>> check(capture(), 'rank 0')
        >>> check({'python': [3]}, 'rank 1')
        Traceback (most recent call last):
        ...
        ValueError: rank 1 is not an RNG state this package wrote (ValueError: not enough values to unpack \
(expected 3, got 1)); it holds python
    """
    if not isinstance(state, dict):
        raise ValueError(f'{name} is not an RNG state this package wrote: a {type(state).__name__}, not a dict')
    here = capture()
    try:
        restore(state)
    except Exception as error:  # any malformed value: the setters of random, NumPy and torch raise their own types
        raise ValueError(f'{name} is not an RNG state this package wrote ({type(error).__name__}: {error}); it '
                         f'holds {", ".join(sorted(map(str, state)))}') from None
    finally:
        restore(here)
