#!/usr/bin/env bash
# On the lent GPU machine (Python 3.12 and torch with CUDA, no network): install the carried wheels of
# scripts/gpu/fetch_wheels.sh into a folder of their own, without their dependencies and without the package index,
# and run scripts/check_gpu.py with them on the path. The table goes to stdout; with $OUT set (the GPU machine sets
# it), $OUT/check_gpu.json and $OUT/check_gpu.md hold the result. Arguments go to check_gpu.py.
#   scripts/gpu/run_on_device.sh [check_gpu.py arguments]
#   PYTHON=.venv-gpu/bin/python scripts/gpu/run_on_device.sh --device cpu   # what make gpu-rehearsal runs
set -euo pipefail
cd "$(dirname "$0")/../.."
WHEELS=${WHEELS:-.gpu-wheels}
PYTHON=${PYTHON:-python3}
if ! ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    echo "run_on_device: no wheels in $WHEELS; run scripts/gpu/fetch_wheels.sh first (where there is network)" >&2
    exit 2
fi
SITE=$(mktemp -d)/site
"$PYTHON" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --no-compile --no-cache-dir \
    --target "$SITE" "$WHEELS"/*.whl
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
# The versions; a Composer that cannot be imported is said here, and the parts that need it fail on their own rows
"$PYTHON" -c 'import composer_sampling, torch
try:
    import composer
    composer_version = composer.__version__
except Exception as error:
    composer_version = f"not importable ({type(error).__name__}: {error})"
print(f"run_on_device: torch {torch.__version__}, CUDA {torch.version.cuda}, GPUs {torch.cuda.device_count()}, \
Composer {composer_version}, composer_sampling from {composer_sampling.__file__}")'
"$PYTHON" scripts/check_gpu.py ${OUT:+--out "$OUT"} "$@"
