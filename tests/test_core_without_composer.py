"""The order core imports and works without Composer: every module of the package but Composer's callbacks, the
recipe runner and the training entry point, in a fresh interpreter where ``composer`` (and the runner's omegaconf
and tabulate) cannot be imported, as after ``pip install composer-sampling`` without the ``composer`` extra. Nor can
transformers and accelerate: the Hugging Face adapter is skipped, and the core needs neither."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = '''
import importlib, pkgutil, sys
for name in ('composer', 'omegaconf', 'tabulate', 'llmfoundry', 'transformers', 'accelerate'):
    sys.modules[name] = None  # import name raises ModuleNotFoundError, as when it is not installed
import composer_sampling
COMPOSER_ONLY = ('composer_sampling.callbacks', 'composer_sampling.recipes', 'composer_sampling.train',
                 'composer_sampling.lightning', 'composer_sampling.transformers')
failed = []
for module in pkgutil.walk_packages(composer_sampling.__path__, 'composer_sampling.'):
    if module.name.startswith(COMPOSER_ONLY):
        continue
    try:
        importlib.import_module(module.name)
    except Exception as error:
        failed.append(f'{module.name}: {error!r}')
print('FAILED', failed)
for name in ('composer_sampling.callbacks', 'composer_sampling.recipes'):
    try:
        importlib.import_module(name)
    except ImportError as error:
        print('REFUSED', error)
try:
    composer_sampling.SamplerSync
except ImportError as error:
    print('REFUSED', error)
from torch.utils.data import DataLoader, RandomSampler
loader = composer_sampling.distribute(DataLoader(range(12), batch_size=2, sampler=RandomSampler(range(12))), 2, 0)
report = composer_sampling.check_plan(lambda rank, world: composer_sampling.distribute(
    DataLoader(range(12), batch_size=2, sampler=RandomSampler(range(12))), world, rank), world_size=2, epochs=1)
print('PLAN', report.ok, sorted(i for batch in loader for i in batch.tolist()) != [])
print('COMPOSER', 'composer' in sys.modules and sys.modules['composer'] is not None)
'''


def test_the_order_core_needs_no_composer() -> None:
    result = subprocess.run([sys.executable, '-c', PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert 'FAILED []' in lines, result.stdout
    refusals = [line for line in lines if line.startswith('REFUSED')]
    callbacks = ("REFUSED composer_sampling.callbacks (SamplerSync, SampleLedger) needs composer (not installed): pip "
                 "install 'composer-sampling[composer]'. With Lightning, use composer_sampling.lightning.SamplerSync "
                 "and SampleLedger (pip install 'composer-sampling[lightning]'); in a loop of your own or with "
                 'Lightning Fabric, composer_sampling.DataOrder')
    assert refusals == [
        callbacks,
        'REFUSED composer_sampling.recipes (the recipe runner: composer-sampling train, plan and recipes) needs '
        "composer, omegaconf, tabulate (not installed): pip install 'composer-sampling[composer]'",
        callbacks,
    ], result.stdout
    assert 'PLAN True True' in lines and 'COMPOSER False' in lines, result.stdout
