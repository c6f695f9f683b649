"""A bag-of-embeddings classifier: a plain ``torch.nn.Module``, wrapped for Composer by the recipe runner.

Example:
    >>> import torch
    >>> model = build_model(embedding_dim=8)
    >>> model(torch.tensor([[3, 4, 0]])).shape
    torch.Size([1, 3])
"""

from __future__ import annotations

import torch
from torch import nn

from textclf.data import NUM_CLASSES, PAD, VOCAB


class BagOfEmbeddings(nn.Module):
    """Mean of the token embeddings (padding left out), then a linear layer to the topics."""

    def __init__(self, embedding_dim: int, num_classes: int) -> None:
        super().__init__()
        self.num_classes = num_classes  # ComposerClassifier reads it for its metrics
        self.embedding = nn.Embedding(len(VOCAB), embedding_dim, padding_idx=PAD)
        self.head = nn.Linear(embedding_dim, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        mask = (tokens != PAD).unsqueeze(-1).float()
        mean = (self.embedding(tokens) * mask).sum(1) / mask.sum(1).clamp(min=1)
        return self.head(mean)


def build_model(embedding_dim: int = 32) -> BagOfEmbeddings:
    """The recipe's model builder: it receives exactly the recipe's ``kwargs``."""
    return BagOfEmbeddings(embedding_dim, NUM_CLASSES)
