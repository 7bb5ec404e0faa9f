#!/usr/bin/env bash
# Fill .whl/ (gitignored) with the wheels that gpu/validate.sh installs on the GPU machine,
# which has no network. Run it on a machine with PyPI, before handing the working tree
# over: `bash gpu/prepare_wheels.sh [DEST]` (DEST defaults to .whl/ at the repository root).
#
# Every pin in gpu/wheels.txt is fetched as a wheel for CPython 3.12 on x86-64 Linux
# (pure-Python wheels match too); a pin marked "build: sdist" has no wheel on PyPI and is
# built here from its source release, which is safe for pure-Python projects only.
# Wheels already in DEST are kept; wheels that no pin names any more are removed, so that
# the folder holds one version of each distribution. Ends with the folder's total size.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PINS="$ROOT/gpu/wheels.txt"
DEST="${1:-$ROOT/.whl}"
if [ -n "${PYTHON:-}" ]; then
    PY="$PYTHON"
elif [ -x "$ROOT/.venv/bin/python" ]; then
    PY="$ROOT/.venv/bin/python"
else
    PY=python3
fi

say() { printf 'prepare_wheels: %s\n' "$*" >&2; }

# The GPU machine runs Python 3.12 on glibc 2.39 (Ubuntu 24.04); nvidia-resiliency-ext
# 0.6.0 ships only a manylinux_2_39 wheel.
PLATFORMS=()
for tag in manylinux_2_39_x86_64 manylinux_2_35_x86_64 manylinux_2_34_x86_64 manylinux_2_31_x86_64 \
           manylinux_2_28_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
           manylinux1_x86_64 linux_x86_64; do
    PLATFORMS+=(--platform "$tag")
done

# Some machines configure local package folders that may be absent; pip warns per package.
quiet_pip() { { grep -v "^WARNING: Location 'file:" || true; } >&2; }

normalise() { printf '%s' "$1" | tr 'A-Z' 'a-z' | sed -E 's/[-_.]+/-/g'; }

# "name version" for a wheel file name (name and version are its first two fields).
wheel_key() {
    local base="${1##*/}"
    local name="${base%%-*}" rest="${base#*-}"
    printf '%s %s' "$(normalise "$name")" "${rest%%-*}"
}

mkdir -p "$DEST"
wanted=()
while IFS= read -r line; do
    pin="${line%%#*}"
    pin="$(printf '%s' "$pin" | tr -d '[:space:]')"
    [ -z "$pin" ] && continue
    name="${pin%%==*}" version="${pin#*==}"
    key="$(normalise "$name") $version"
    wanted+=("$key")
    have=""
    for wheel in "$DEST"/*.whl; do
        [ -e "$wheel" ] || continue
        [ "$(wheel_key "$wheel")" = "$key" ] && have="$wheel" && break
    done
    if [ -n "$have" ]; then
        continue
    fi
    if [[ "$line" == *"build: sdist"* ]]; then
        say "building $pin from its source release (pure Python)"
        "$PY" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-binary "$name" -w "$DEST" "$pin" 2>&1 | quiet_pip
    else
        say "downloading $pin"
        "$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
            --python-version 3.12 --implementation cp "${PLATFORMS[@]}" -d "$DEST" "$pin" 2>&1 | quiet_pip
    fi
done < "$PINS"

# Drop what no pin names (older versions, removed packages).
for wheel in "$DEST"/*.whl; do
    [ -e "$wheel" ] || continue
    key="$(wheel_key "$wheel")"
    keep=""
    for want in "${wanted[@]}"; do
        [ "$want" = "$key" ] && keep=1 && break
    done
    if [ -z "$keep" ]; then
        say "removing ${wheel##*/}: gpu/wheels.txt does not pin it"
        rm -f "$wheel"
    fi
done

count=$(find "$DEST" -maxdepth 1 -type f -name '*.whl' | wc -l)
if [ "$count" -ne "${#wanted[@]}" ]; then
    say "expected ${#wanted[@]} wheels in $DEST, found $count"
    exit 1
fi
bytes=$(find "$DEST" -maxdepth 1 -type f -name '*.whl' -printf '%s\n' | awk '{s += $1} END {print s + 0}')
printf '%s: %d wheels, %.1f MiB\n' "$DEST" "$count" "$(awk -v b="$bytes" 'BEGIN {print b / 1048576}')"
