#!/usr/bin/env bash
# Installs what megamoe needs to build and test on a Debian machine like CI's (run as root).
# The CUDA toolkit (headers + NVRTC, no GPU needed) must already be present: it is part of the
# machine image; Debian's own CUDA packages are too old for sm_90a.
set -euo pipefail

need_apt=()
command -v cmake >/dev/null || need_apt+=(cmake)
command -v g++ >/dev/null || need_apt+=(g++)
command -v clang-format >/dev/null || need_apt+=(clang-format)
[ -f /usr/include/gtest/gtest.h ] || need_apt+=(libgtest-dev)
[ -d /usr/include/benchmark ] || need_apt+=(libbenchmark-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: apt-get install ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
fi

cuda_root=${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}
if [ ! -f "$cuda_root/include/nvrtc.h" ]; then
  echo "setup: no CUDA toolkit at $cuda_root (need include/nvrtc.h and libnvrtc);" \
       "set CUDA_HOME to a CUDA 12.8+ toolkit" >&2
  exit 1
fi

# Python side: the build backend and test runner (pinned in pyproject.toml / requirements-dev.txt).
python3 -m pip install -q --disable-pip-version-check -r requirements-dev.txt
echo "setup: ok (cmake $(cmake --version | head -1 | awk '{print $3}'), CUDA at $cuda_root)"
