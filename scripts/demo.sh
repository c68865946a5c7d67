#!/usr/bin/env bash
# The main job: set up, build, and run `megamoe demo` (the flagship layer on the default preset
# against the CPU oracle and the baseline on a GPU; the CPU oracle alone, said so, without one).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)" --target megamoe_tool
build/megamoe info
build/megamoe demo "$@"
