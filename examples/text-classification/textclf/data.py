"""Short generated "sentences" about three topics: a few thousand samples, made offline from a seed.

Each sample is ``(token_ids, label, index)``: a topic's words mixed with filler
words every topic shares, so the model has to learn which words carry the topic;
the index lets ``SampleLedger`` record which samples were trained.

Example:
    >>> data = build_dataset(size=10)
    >>> len(data), data[3][1] in (0, 1, 2), data[3][2]
    (10, True, 3)
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

TOPICS = {
    'sport': 'goal match team score coach league player season referee stadium',
    'weather': 'rain cloud storm sunny wind forecast snow cold humid thunder',
    'cooking': 'oven recipe flour bake salt simmer garlic butter pan roast',
}
FILLER = 'the a of and to in is was it for on with that this very'
PAD = 0
VOCAB = ['<pad>', *FILLER.split(), *(word for words in TOPICS.values() for word in words.split())]
NUM_CLASSES = len(TOPICS)


class TopicSentences(Dataset):
    """``size`` sentences of 4 to 16 tokens; sample ``i`` is generated from ``(seed, i)`` when read."""

    def __init__(self, size: int, seed: int = 0, topic_share: float = 0.4) -> None:
        self.size, self.seed, self.topic_share = size, seed, topic_share
        self.filler = np.array([VOCAB.index(word) for word in FILLER.split()])
        self.topic_words = [np.array([VOCAB.index(word) for word in words.split()]) for words in TOPICS.values()]

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, int]:
        if not 0 <= index < self.size:
            raise IndexError(f'index {index} is outside a dataset of {self.size} sentences')
        rng = np.random.default_rng([self.seed, index])
        label = int(rng.integers(NUM_CLASSES))
        length = int(rng.integers(4, 17))
        from_topic = rng.random(length) < self.topic_share
        words = np.where(from_topic, rng.choice(self.topic_words[label], length), rng.choice(self.filler, length))
        return torch.as_tensor(words, dtype=torch.int64), label, index


def build_dataset(size: int = 3000, seed: int = 0) -> TopicSentences:
    """The recipe's dataset builder: it receives exactly the recipe's ``kwargs``."""
    return TopicSentences(size, seed)
