"""Composer's own parts by the snake-case names recipes give them: callbacks, schedulers, loggers and algorithms.

Plain tables that import nothing, each mapping a recipe name to the class's name in its Composer package, with what
the runner must know beyond the name. ``tests/recipes/test_composer_parts.py`` holds them to Composer's own.

Example:
    >>> SCHEDULERS['cosine_annealing_with_warmup']
    ('CosineAnnealingWithWarmupScheduler', ('t_warmup',), ('t_max',))
    >>> sorted(REFUSED_ALGORITHMS)
    ['alibi', 'selective_backprop', 'seq_length_warmup']
"""

from __future__ import annotations

__all__ = ['ALGORITHMS', 'ALGORITHM_CHOICES', 'BATCH_READERS', 'CALLBACKS', 'CHECKPOINT_ARGUMENTS', 'LOGGERS',
           'LOGGER_PATHS', 'REFUSED_ALGORITHMS', 'SAME_UNIT_WARMUP', 'SCHEDULERS', 'TIMES_FROM_ZERO', 'TIME_LISTS',
           'refused_algorithm']

#: Composer's callbacks (``composer.callbacks``).
CALLBACKS = {
    'activation_monitor': 'ActivationMonitor', 'checkpoint_saver': 'CheckpointSaver', 'early_stopper': 'EarlyStopper',
    'export_for_inference': 'ExportForInferenceCallback', 'free_outputs': 'FreeOutputs', 'generate': 'Generate',
    'image_visualizer': 'ImageVisualizer', 'lr_monitor': 'LRMonitor', 'load_checkpoint': 'LoadCheckpoint',
    'memory_monitor': 'MemoryMonitor', 'memory_snapshot': 'MemorySnapshot', 'mlperf': 'MLPerfCallback',
    'nan_monitor': 'NaNMonitor', 'oom_observer': 'OOMObserver', 'optimizer_monitor': 'OptimizerMonitor',
    'runtime_estimator': 'RuntimeEstimator', 'speed_monitor': 'SpeedMonitor',
    'system_metrics_monitor': 'SystemMetricsMonitor', 'threshold_stopper': 'ThresholdStopper',
}
#: The argument of a Composer callback that names a checkpoint it unpickles (``torch.load(weights_only=False)``).
CHECKPOINT_ARGUMENTS = {'LoadCheckpoint': 'load_path'}

#: Composer's schedulers (``composer.optim``): name -> (class, required time arguments, optional time arguments).
SCHEDULERS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    'constant': ('ConstantScheduler', (), ('t_max',)),
    'step': ('StepScheduler', ('step_size',), ()),
    'multi_step': ('MultiStepScheduler', ('milestones',), ()),
    'linear': ('LinearScheduler', (), ('t_max',)),
    'exponential': ('ExponentialScheduler', (), ('decay_period',)),
    'cosine_annealing': ('CosineAnnealingScheduler', (), ('t_max',)),
    'cosine_annealing_warm_restarts': ('CosineAnnealingWarmRestartsScheduler', ('t_0',), ()),
    'polynomial': ('PolynomialScheduler', (), ('t_max',)),
    'constant_with_warmup': ('ConstantWithWarmupScheduler', ('t_warmup',), ('t_max',)),
    'linear_with_warmup': ('LinearWithWarmupScheduler', ('t_warmup',), ('t_max',)),
    'cosine_annealing_with_warmup': ('CosineAnnealingWithWarmupScheduler', ('t_warmup',), ('t_max',)),
    'polynomial_with_warmup': ('PolynomialWithWarmupScheduler', ('t_warmup',), ('t_max',)),
    'multi_step_with_warmup': ('MultiStepWithWarmupScheduler', ('t_warmup', 'milestones'), ()),
}
#: The schedulers whose ``t_warmup`` and ``t_max`` Composer requires in one unit (``ep`` counted as batches).
SAME_UNIT_WARMUP = ('LinearWithWarmupScheduler', 'CosineAnnealingWithWarmupScheduler', 'PolynomialWithWarmupScheduler')
#: Time arguments that may be 0; every other one must be positive (a period or a length Composer divides by).
TIMES_FROM_ZERO = ('t_warmup', 'milestones')
#: Time arguments that are lists of times.
TIME_LISTS = ('milestones',)

#: Composer's loggers (``composer.loggers``).
LOGGERS = {
    'progress_bar': 'ProgressBarLogger', 'console': 'ConsoleLogger', 'file': 'FileLogger',
    'in_memory': 'InMemoryLogger', 'wandb': 'WandBLogger', 'mlflow': 'MLFlowLogger',
    'tensorboard': 'TensorboardLogger', 'comet_ml': 'CometMLLogger', 'neptune': 'NeptuneLogger',
    'remote_uploader_downloader': 'RemoteUploaderDownloader', 'mosaicml': 'MosaicMLLogger', 'slack': 'SlackLogger',
}

#: What Composer's loggers write on this machine: class -> (argument, its default, what it names). Composer opens a
#: ``log file`` with ``'w+'`` (FileLogger's ``overwrite`` is a tuple, always true); a ``run folder`` gets a folder
#: named after the run; a ``folder`` and a ``store`` (a path or a ``file:`` URI) get files with names of their own.
LOGGER_PATHS: dict[str, tuple[str, str | None, str]] = {
    'FileLogger': ('filename', '{run_name}/logs-rank{rank}.txt', 'log file'),
    'TensorboardLogger': ('log_dir', 'tensorboard_logs', 'run folder'),
    'WandBLogger': ('init_kwargs.dir', None, 'folder'),
    'MLFlowLogger': ('tracking_uri', None, 'store'),
}

#: Composer's algorithms (``composer.algorithms``), named as their Composer subpackages are.
ALGORITHMS = {
    'alibi': 'Alibi', 'augmix': 'AugMix', 'blurpool': 'BlurPool', 'channels_last': 'ChannelsLast',
    'colout': 'ColOut', 'cutmix': 'CutMix', 'cutout': 'CutOut', 'ema': 'EMA', 'factorize': 'Factorize',
    'gated_linear_units': 'GatedLinearUnits', 'ghost_batchnorm': 'GhostBatchNorm',
    'gradient_clipping': 'GradientClipping', 'gyro_dropout': 'GyroDropout', 'label_smoothing': 'LabelSmoothing',
    'layer_freezing': 'LayerFreezing', 'low_precision_groupnorm': 'LowPrecisionGroupNorm',
    'low_precision_layernorm': 'LowPrecisionLayerNorm', 'mixup': 'MixUp', 'no_op_model': 'NoOpModel',
    'progressive_resizing': 'ProgressiveResizing', 'randaugment': 'RandAugment', 'sam': 'SAM',
    'selective_backprop': 'SelectiveBackprop', 'seq_length_warmup': 'SeqLengthWarmup',
    'squeeze_excite': 'SqueezeExcite', 'stochastic_depth': 'StochasticDepth', 'swa': 'SWA',
    'weight_standardization': 'WeightStandardization',
}
#: Composer's algorithms that read the batch at their key arguments, and the dimensions their input must have at
#: least (0: any); Composer finds a batch that does not fit only at the first one.
BATCH_READERS: dict[str, tuple[tuple[str, ...], int]] = {
    'CutMix': (('input_key', 'target_key'), 4), 'CutOut': (('input_key',), 4),
    'ColOut': (('input_key', 'target_key'), 4), 'MixUp': (('input_key', 'target_key'), 0),
    'LabelSmoothing': (('target_key',), 0),
    'ProgressiveResizing': (('input_key', 'target_key'), 3),
}
#: Arguments of Composer's algorithms that Composer checks only when the algorithm first runs, with their choices.
ALGORITHM_CHOICES: dict[str, dict[str, tuple[str, ...]]] = {
    'GradientClipping': {'clipping_type': ('adaptive', 'norm', 'value')},
}
_PROMISE = 'a recipe promises every sample trained once an epoch, in batches of the planned size, and an exact resume'
#: The algorithms a recipe refuses, with the reason: each changes which samples train or the shape of the batches.
REFUSED_ALGORITHMS = {
    'seq_length_warmup': 'it truncates or reshapes every batch to a warming-up sequence length, so samples are cut '
                         f'and batches are not the planned ones; {_PROMISE}',
    'selective_backprop': 'it drops the samples of lowest loss from the backward pass, so part of every batch '
                          f'never trains; {_PROMISE}',
    'alibi': 'it reshapes every batch of a dict (train_sequence_length_scaling, 0.25 unless set, folds samples into '
             f'fewer, longer rows), so batches are not the planned ones; {_PROMISE}. For its model surgery alone, '
             'call composer.functional.apply_alibi in your model builder',
}


def refused_algorithm(algorithm: object) -> tuple[str, str, str] | None:
    """The name, Composer's class and the reason when ``algorithm`` is an instance of one a recipe refuses.

    Example:
        >>> refused_algorithm(object()) is None
        True
    """
    import composer.algorithms

    for name, reason in REFUSED_ALGORITHMS.items():
        refused = getattr(composer.algorithms, ALGORITHMS[name])
        if isinstance(algorithm, refused):
            return name, refused.__name__, reason
    return None
