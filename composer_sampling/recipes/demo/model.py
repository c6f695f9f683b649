"""A small multilayer perceptron as a ``ComposerModel``, for the dict batches of the demo datasets."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from composer.models import ComposerModel
from torch import nn
from torchmetrics import Metric
from torchmetrics.classification import MulticlassAccuracy

from composer_sampling.recipes.demo.data import NUM_CLASSES, NUM_FEATURES

__all__ = ['MLPClassifier']


class MLPClassifier(ComposerModel):
    """Two linear layers with a ReLU; reports ``MulticlassAccuracy``.

    Example:
        >>> model = MLPClassifier(hidden_size=8)
        >>> model({'input': torch.zeros(2, 64)}).shape
        torch.Size([2, 10])
    """

    def __init__(self, hidden_size: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(NUM_FEATURES, hidden_size), nn.ReLU(), nn.Linear(hidden_size, NUM_CLASSES))
        self.train_accuracy = MulticlassAccuracy(num_classes=NUM_CLASSES, average='micro')
        self.eval_accuracy = MulticlassAccuracy(num_classes=NUM_CLASSES, average='micro')

    def forward(self, batch: dict[str, Any]) -> torch.Tensor:
        return self.net(batch['input'])

    def loss(self, outputs: torch.Tensor, batch: dict[str, Any], *args: Any, **kwargs: Any) -> torch.Tensor:
        return F.cross_entropy(outputs, batch['target'])

    def get_metrics(self, is_train: bool = False) -> dict[str, Metric]:
        return {'MulticlassAccuracy': self.train_accuracy if is_train else self.eval_accuracy}

    def update_metric(self, batch: dict[str, Any], outputs: torch.Tensor, metric: Metric) -> None:
        metric.update(outputs.argmax(dim=-1), batch['target'])
