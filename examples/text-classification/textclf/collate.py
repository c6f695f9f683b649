"""Pad a batch of sentences and keep which samples it holds.

Example:
    >>> import torch
    >>> tokens, labels, indices = pad_batch([(torch.tensor([5, 6]), 1, 40), (torch.tensor([7]), 0, 41)])
    >>> tokens.tolist(), labels.tolist(), indices.tolist()
    ([[5, 6], [7, 0]], [1, 0], [40, 41])
"""

from __future__ import annotations

import torch
from torch.nn.utils.rnn import pad_sequence

from textclf.data import PAD


def pad_batch(samples: list[tuple[torch.Tensor, int, int]],
              pad_id: int = PAD) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(tokens [batch, longest], labels [batch], indices [batch])``, shorter sentences padded with ``pad_id``.

    A plain-module model sees only ``tokens`` and ``labels``; ``SampleLedger(index_key=2)`` reads the indices.
    """
    tokens = pad_sequence([sentence for sentence, _, _ in samples], batch_first=True, padding_value=pad_id)
    return tokens, torch.tensor([label for _, label, _ in samples]), torch.tensor([i for _, _, i in samples])
