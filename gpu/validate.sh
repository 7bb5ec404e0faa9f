#!/usr/bin/env bash
# The GPU tier in one command, for a machine with NVIDIA GPUs and no network:
#   bash gpu/validate.sh [--out FILE] [--nproc N] [--only SKILL|CHECK] [--wheels DIR] [--timeout S]
# Installs the wheels that gpu/prepare_wheels.sh put in .whl/, runs every GPU check with
# torchrun on all GPUs, writes one results file ($OUT/gpu-results.json when $OUT is set,
# else out/gpu/gpu-results.json) for `mbskills check --gpu-results FILE --write-cards`.
# Exit status: 0 no check failed, 1 a check failed, 2 bad arguments, 3 no CUDA GPU,
# 4 the wheels could not be installed. The work is in gpu/launch.py; $PYTHON picks the
# interpreter (default: python3, the one that has torch with CUDA).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "${PYTHON:-python3}" "$HERE/launch.py" "$@"
