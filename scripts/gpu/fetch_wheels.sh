#!/usr/bin/env bash
# Download the wheels scripts/check_gpu.py needs on the lent GPU machine that its image lacks (scripts/gpu/wheels.txt),
# for CPython 3.12 on manylinux x86-64, without their dependencies, and build composer-sampling's own wheel from this
# checkout. The folder (default .gpu-wheels, git-ignored) is emptied first. Fails when the wheels pass 48 MiB: a call
# to the GPU machine carries at most 64 MiB, the working tree included.
#   scripts/gpu/fetch_wheels.sh [FOLDER]
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=${1:-.gpu-wheels}
PYTHON=${PYTHON:-python3}
LIMIT_MIB=48

rm -rf "$DEST"
mkdir -p "$DEST"
"$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --abi cp312 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d "$DEST" -r scripts/gpu/wheels.txt
"$PYTHON" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$DEST" .

count=$(find "$DEST" -name '*.whl' | wc -l)
expected=$(( $(grep -c '^[A-Za-z]' scripts/gpu/wheels.txt) + 1 ))
if [ "$count" -ne "$expected" ]; then
    echo "fetch_wheels: $count wheels in $DEST, expected $expected (wheels.txt and composer-sampling)" >&2
    exit 1
fi
bytes=$(du -cb "$DEST"/*.whl | tail -1 | cut -f1)
echo "fetch_wheels: $count wheels, $(( bytes / 1024 )) KiB in $DEST (limit $LIMIT_MIB MiB)"
if [ "$bytes" -gt $(( LIMIT_MIB * 1024 * 1024 )) ]; then
    echo "fetch_wheels: the wheels pass $LIMIT_MIB MiB; the GPU machine takes 64 MiB a call, tree included" >&2
    exit 1
fi
