"""The library stays light: Composer is imported only to train or plan a recipe (checked in one fresh interpreter).

``plan`` runs the checks ``train`` runs, which import every part's builder (Composer's callbacks among them) and
check ``parallelism_config`` against Composer's classes; the library, the samplers, ``--help``, ``recipes``, and a
recipe that its schema refuses (exit 2 before anything is resolved) do not.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = '''
import sys
steps = {
    'import composer_sampling': 'import composer_sampling',
    'the samplers, distribute, check_plan, summarize': (
        'from composer_sampling import ResumableDistributedSampler, distribute, check_plan, summarize, iter_samplers'),
    'composer-sampling --help': 'from composer_sampling.recipes.cli import main\\ntry:\\n    main(["--help"])\\n'
                                'except SystemExit:\\n    pass',
    'composer-sampling recipes': 'main(["recipes"])',
    'composer-sampling plan of a recipe its schema refuses': 'main(["plan", "yamls/digits.yaml", "seed=-1"])',
}
for name, code in steps.items():
    exec(code)
    if 'composer' in sys.modules:
        print('COMPOSER AFTER', name)
        break
from composer_sampling import SamplerSync
print('CALLBACK BRINGS COMPOSER', 'composer' in sys.modules)
'''


def test_no_composer_without_training() -> None:
    result = subprocess.run([sys.executable, '-c', PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert 'COMPOSER AFTER' not in result.stdout, result.stdout
    assert 'CALLBACK BRINGS COMPOSER True' in result.stdout  # the probe can see an import of Composer
