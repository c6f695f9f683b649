"""Tiny, offline parts for running llm-foundry's own ``train_from_yaml`` (tests marked ``llmfoundry``).

A BPE tokenizer trained here (no BOS token; a vocabulary large enough that every
word of the data is one token), an MDS set of text samples written by
mosaicml-streaming's ``MDSWriter`` and a JSONL of prompt/response pairs. Sample
``i`` starts with the word ``s{i}``, its own token, so the first token of every
row of a batch names the sample it came from. The YAML is llm-foundry's schema:
a one-layer MPT with torch attention, fp32 on the CPU.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

__all__ = ['SEQ_LEN', 'sample_of', 'write_jsonl', 'write_mds', 'write_tokenizer', 'yaml_for']

SEQ_LEN = 12
_WORDS = [f'w{k}' for k in range(40)]


def _text(index: int, words: int = SEQ_LEN + 4) -> str:
    rng = random.Random(index)
    return ' '.join([f's{index}', *rng.choices(_WORDS, k=words)])


def write_tokenizer(folder: Path, samples: int) -> Path:
    """A BPE tokenizer whose vocabulary holds every ``s{i}`` and ``w{k}`` as one token, saved as a local folder."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token='<unk>'))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    words = [f's{i}' for i in range(samples)] + _WORDS
    trainer = trainers.BpeTrainer(vocab_size=4 * samples + 512, min_frequency=1,
                                  special_tokens=['<pad>', '<eos>', '<unk>'])
    tokenizer.train_from_iterator([' '.join(words)] * 2, trainer)
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token='<pad>', eos_token='<eos>',
                                      unk_token='<unk>')
    wrapped.save_pretrained(folder)
    return folder


def sample_of(tokenizer_folder: Path, samples: int) -> dict[int, int]:
    """Token id -> the sample whose first word it is."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_folder))
    ids = {}
    for i in range(samples):
        encoded = tokenizer(f's{i}', add_special_tokens=False)['input_ids']
        assert len(encoded) == 1, f's{i} is not one token: {encoded}'
        ids[encoded[0]] = i
    return ids


def write_mds(folder: Path, samples: int) -> Path:
    """``samples`` text samples as MDS shards (column ``text``)."""
    from streaming import MDSWriter

    with MDSWriter(out=str(folder), columns={'text': 'str'}, size_limit=1 << 12) as writer:
        for index in range(samples):
            writer.write({'text': _text(index)})
    return folder


def write_jsonl(path: Path, samples: int) -> Path:
    """``samples`` prompt/response pairs, one JSON object a line."""
    lines = [json.dumps({'prompt': _text(i, 3), 'response': _text(10_000 + i, 4).split(' ', 1)[1]})
             for i in range(samples)]
    path.write_text('\n'.join(lines) + '\n')
    return path


def yaml_for(tokenizer: Path, vocab_size: int, train_loader: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """An llm-foundry training config: a tiny MPT, fp32 on the CPU; ``fields`` override the top level."""
    config: dict[str, Any] = {
        'max_seq_len': SEQ_LEN,
        'seed': 1,
        'model': {'name': 'mpt_causal_lm', 'init_device': 'cpu', 'd_model': 16, 'n_heads': 2, 'n_layers': 1,
                  'expansion_ratio': 2, 'max_seq_len': SEQ_LEN, 'vocab_size': vocab_size, 'no_bias': True,
                  'attn_config': {'attn_impl': 'torch'}, 'loss_fn': 'torch_crossentropy'},
        'tokenizer': {'name': str(tokenizer), 'kwargs': {'model_max_length': SEQ_LEN}},
        'train_loader': train_loader,
        'optimizer': {'name': 'decoupled_adamw', 'lr': 1e-3, 'betas': [0.9, 0.95], 'eps': 1e-8, 'weight_decay': 0.0},
        'scheduler': {'name': 'constant_with_warmup', 't_warmup': '0ba'},
        'algorithms': {},
        'max_duration': '2ep',
        'eval_interval': 1,
        'global_train_batch_size': 8,
        'device_train_microbatch_size': 4,
        'device_eval_batch_size': 4,
        'precision': 'fp32',
        'progress_bar': False,
        'log_to_console': False,
        'python_log_level': None,
        'log_config': False,
        'dist_timeout': 60,
        'callbacks': {'sampler_sync': {}, 'sample_ledger': {}},
    }
    config.update(fields)
    return config


def write_yaml(path: Path, config: dict[str, Any]) -> Path:
    OmegaConf.save(OmegaConf.create(config), path)
    return path
