#!/usr/bin/env bash
# The test command: build (warnings as errors), run every C++ test (GPU tests skip cleanly
# without a GPU), check formatting, then install and test the Python package.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${MEGAMOE_BUILD_DIR:-build}
jobs=${MEGAMOE_JOBS:-$(nproc)}

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMEGAMOE_WERROR=ON
cmake --build "$build" -j "$jobs"

scripts/check_format.sh

(cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 900)

if [ -f pyproject.toml ]; then
  python3 -m pip install -q --disable-pip-version-check --no-build-isolation .
  python3 -m pytest tests/python -q
fi
