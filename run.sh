#!/usr/bin/env bash
# The project's two entry points, each doing its own setup on a fresh machine:
#   bash run.sh          the main job: validate the bundle, check every skill claim
#                        against the pinned Megatron-Bridge (CPU), mutate every claim
#                        section to show the checks notice, run the claims on the other
#                        releases (mbskills drift, wheels from PyPI), install into each
#                        agent client and see it read the skills, then run the evals:
#                        against $MBSKILLS_MODEL (e.g. anthropic:claude-sonnet-4-5) when
#                        set, else offline from the recorded answers in evals/calibration,
#                        grade them ($MBSKILLS_JUDGE as the judge when set) and write reports
#   bash run.sh test     the test suite (extra arguments go to pytest); builds .venv-gateway
#                        (a LiteLLM proxy) for the gateway tier unless MBSKILLS_SKIP_GATEWAY=1,
#                        and installs the agent clients (npm, tests/clients) for the
#                        client tests unless MBSKILLS_SKIP_CLIENTS=1
#   bash run.sh bench    the performance benchmark, bench/perf.py (extra arguments go to
#                        it); builds .venv-bench with inspect_ai for the comparison
#   bash run.sh bench-agents  eval --agent against the bare clients, bench/agents.py
#                        (extra arguments go to it); installs the clients first
# Setup: find Python 3.12, build .venv, install requirements/lock.txt, then
# megatron-bridge without its own dependencies (requirements/bridge-nodeps.txt).
# A second run reuses the venv while requirements/ and pyproject.toml are unchanged.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${MBSKILLS_VENV:-$ROOT/.venv}"

say() { printf 'run.sh: %s\n' "$*" >&2; }

is_py312() { "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' >/dev/null 2>&1; }

find_python() {
    local c
    # Explicit choice first, then PATH, then pyenv's versions (its shim refuses
    # python3.12 unless that version is selected), then common system paths.
    for c in "${MBSKILLS_PYTHON:-}" python3.12; do
        [ -n "$c" ] && command -v "$c" >/dev/null 2>&1 && is_py312 "$c" && { command -v "$c"; return; }
    done
    local pyroot
    pyroot="$( (pyenv root) 2>/dev/null || echo "$HOME/.pyenv")"
    for c in "$pyroot"/versions/3.12*/bin/python3.12 /usr/bin/python3.12 /usr/local/bin/python3.12; do
        [ -x "$c" ] && is_py312 "$c" && { echo "$c"; return; }
    done
    return 1
}

ensure_venv() {
    if [ -x "$VENV/bin/python" ] && is_py312 "$VENV/bin/python"; then
        return
    fi
    local py
    if ! py="$(find_python)"; then
        say "Python 3.12 not found (Megatron-Bridge 0.6.2 needs >=3.12,<3.13)."
        say "Install it (e.g. 'pyenv install 3.12' or 'apt-get install python3.12 python3.12-venv'),"
        say "or point MBSKILLS_PYTHON at a python3.12 binary."
        exit 2
    fi
    say "creating $VENV with $py"
    rm -rf "$VENV"
    "$py" -m venv "$VENV"
}

# Some machines configure local package folders that may be absent; pip warns per package.
quiet_pip() { { grep -v "^WARNING: Location 'file:" || true; } >&2; }

requirements_hash() {
    cat "$ROOT/requirements/lock.txt" "$ROOT/requirements/bridge-nodeps.txt" | sha256sum | cut -d' ' -f1
}

# A venv built from other requirements is rebuilt, so that packages dropped from the
# lock do not linger in it.
drop_stale_venv() {
    local stamp="$VENV/.mbskills-requirements.stamp"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" != "$(requirements_hash)" ]; then
        say "requirements changed since $VENV was built; rebuilding it"
        rm -rf "$VENV"
    fi
}

# The venv holds a CUDA build of torch (PyPI has no other for Linux): about 7 GB. Say so
# before pip fills the disk halfway.
check_disk() {
    local need_kb=$((9 * 1024 * 1024)) free_kb
    free_kb="$(df -Pk "$VENV" | awk 'NR == 2 { print $4 }')"
    if [ -n "$free_kb" ] && [ "$free_kb" -lt "$need_kb" ]; then
        say "$VENV: $((free_kb / 1024)) MB free; torch and Megatron-Bridge need about 9 GB. Free some space, or point MBSKILLS_VENV at a bigger disk."
        exit 2
    fi
}

# Install the pinned set once, and this package (editable) whenever pyproject.toml
# changes; stamps of the files' hashes mark each step done.
ensure_deps() {
    local req="$ROOT/requirements"
    local pip=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
    local stamp="$VENV/.mbskills-requirements.stamp" want
    want="$(requirements_hash)"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        check_disk
        say "installing pinned requirements into $VENV (torch and Megatron-Bridge: a few GB, a few minutes the first time)"
        "${pip[@]}" -r "$req/lock.txt" 2>&1 | quiet_pip
        # Bridge's declared dependencies include CUDA-only packages (Transformer Engine);
        # lock.txt carries the part its training config layer imports.
        "${pip[@]}" --no-deps -r "$req/bridge-nodeps.txt" 2>&1 | quiet_pip
        echo "$want" >"$stamp"
    fi
    local package_stamp="$VENV/.mbskills-package.stamp"
    want="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)"
    if [ ! -f "$package_stamp" ] || [ "$(cat "$package_stamp")" != "$want" ]; then
        "${pip[@]}" --no-deps --no-build-isolation -e "$ROOT" 2>&1 | quiet_pip
        echo "$want" >"$package_stamp"
    fi
}

# inspect_ai lives in its own venv: it is only the benchmark's yardstick, and its
# dependencies must not move the project's pins.
ensure_bench_venv() {
    local bench="$ROOT/.venv-bench" py want
    want="$(sha256sum "$ROOT/requirements/bench-lock.txt" | cut -d' ' -f1)"
    [ -f "$bench/.stamp" ] && [ "$(cat "$bench/.stamp")" = "$want" ] && return
    py="$(find_python)" || { say "Python 3.12 not found for .venv-bench"; exit 2; }
    say "creating $bench (inspect_ai, for the benchmark's comparison)"
    rm -rf "$bench"
    "$py" -m venv "$bench"
    "$bench/bin/python" -m pip install --quiet --disable-pip-version-check -r "$ROOT/requirements/bench-lock.txt" 2>&1 | quiet_pip
    echo "$want" >"$bench/.stamp"
}

# The gateway test tier: a real LiteLLM proxy (tests/gateway.py) in its own venv, so that
# its 116 dependencies cannot move the project's pins. MBSKILLS_SKIP_GATEWAY=1 leaves it out
# (its tests then skip and say why).
ensure_gateway_venv() {
    [ -n "${MBSKILLS_SKIP_GATEWAY:-}" ] && return 0
    local gateway="$ROOT/.venv-gateway" py want
    want="$(sha256sum "$ROOT/requirements/gateway-lock.txt" | cut -d' ' -f1)"
    [ -f "$gateway/.stamp" ] && [ "$(cat "$gateway/.stamp")" = "$want" ] && return 0
    py="$(find_python)" || { say "Python 3.12 not found for .venv-gateway; the gateway tests will be skipped"; return 0; }
    say "creating $gateway (LiteLLM proxy for the gateway tests, about 45 s)"
    rm -rf "$gateway"
    "$py" -m venv "$gateway"
    if "$gateway/bin/python" -m pip install --quiet --disable-pip-version-check -r "$ROOT/requirements/gateway-lock.txt" 2>&1 | quiet_pip; then
        echo "$want" >"$gateway/.stamp"
    else
        say "could not install requirements/gateway-lock.txt; the gateway tests will be skipped"
        rm -rf "$gateway"
    fi
}

run_evals() {
    local model="${MBSKILLS_MODEL:-}" out
    local judge=()
    # A judge only where one is configured; offline, transcripts and regex checks grade.
    [ -n "${MBSKILLS_JUDGE:-}" ] && judge=(--judge "$MBSKILLS_JUDGE")
    if [ -z "$model" ]; then
        # Offline, from the recorded answers. First the invariant: the same answers under
        # every condition give a content uplift of exactly 0, and no uplift gate passes on it.
        out="$ROOT/out/eval-identical"
        rm -rf "$out"
        "$VENV/bin/mbskills" eval --model "replay:$ROOT/evals/calibration" --conditions baseline,skills,inline --out "$out" --progress plain 2>/dev/null
        local code=0
        "$VENV/bin/mbskills" grade "$out" --fail-under-uplift 0 --min-coverage 0 --min-cases 1 2>"$out/grade.log" || code=$?
        # (With no admitted grader deciding content, there is no uplift figure at all: the
        # gate must still fail, on missing evidence.)
        if [ "$code" != 1 ] || grep -Eq "content uplift [a-z]+ [+-][1-9]" "$out/grade.log"; then
            cat "$out/grade.log" >&2
            say "invariant broken: identical answers under every condition must give no content uplift but 0 and fail the uplift gate (grade exited $code)"
            exit 1
        fi
        local seen
        seen="$(grep -o 'content uplift skills +0 pts interval undefined' "$out/grade.log" || echo 'no content uplift figure (nothing decided)')"
        say "invariant holds: identical answers under every condition -> $seen; grade --fail-under-uplift 0 exits 1"
        # Then a real difference in content: the known-bad recorded answers under baseline,
        # the known-good ones under skills and inline (a demonstration of the grading on
        # labelled answers, not a model's uplift).
        model="replay:$ROOT/evals/calibration?baseline=bad-1"
        out="$ROOT/out/eval-replay"
        rm -rf "$out"
    else
        out="$ROOT/out/eval-$(printf '%s' "$model" | tr -c 'A-Za-z0-9._-' '_')"
    fi
    "$VENV/bin/mbskills" eval --model "$model" --conditions baseline,skills,inline --out "$out" --progress plain
    "$VENV/bin/mbskills" grade "$out" "${judge[@]}"
    "$VENV/bin/mbskills" calibrate "${judge[@]}"
    say "reports: $out/BENCHMARK.md, $out/report.html, $out/report.json, $out/junit.xml"
}

ensure_browser() {
    # The report test renders report.html in headless Chromium (Debian's `chromium`).
    command -v chromium >/dev/null 2>&1 && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing chromium for the HTML report test"
        if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 \
            || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1; }; }; then
            say "could not install chromium; the HTML report test will be skipped"
        fi
    else
        say "no chromium and no root apt-get; the HTML report test will be skipped"
    fi
}

# The agent clients the install tests drive (tests/test_client_*.py), pinned in
# tests/clients/package-lock.json. Their tests are part of the suite: a machine without
# Node >= 20 and npm stops here with one line, unless MBSKILLS_SKIP_CLIENTS=1 (then those
# tests skip and say why). Install scripts stay off, but for the postinstall of Claude Code
# and opencode, which puts their platform binary (from an optional package) in place.
# `npm ci` refuses this lock: Qwen Code 0.24.4 names optional platform packages that were
# never published (@teddyzhu/clipboard-darwin-arm64 and others answer 404), and npm ci
# counts them as missing from the lock. So `npm install` runs against the lock, and the
# lock must come out byte for byte as committed, else setup stops.
ensure_clients() {
    [ -n "${MBSKILLS_SKIP_CLIENTS:-}" ] && return 0
    local dir="$ROOT/tests/clients" want major before
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        say "the agent-client tests need Node.js >= 20 and npm (e.g. 'apt-get install nodejs npm', or from nodejs.org); MBSKILLS_SKIP_CLIENTS=1 skips them"
        exit 2
    fi
    major="$(node -p 'process.versions.node.split(".")[0]')"
    if [ "$major" -lt 20 ]; then
        say "the agent-client tests need Node.js >= 20; this is $(node --version) (MBSKILLS_SKIP_CLIENTS=1 skips them)"
        exit 2
    fi
    want="$(cat "$dir/package.json" "$dir/package-lock.json" "$(command -v node)" | sha256sum | cut -d' ' -f1)"
    if [ ! -f "$dir/node_modules/.mbskills.stamp" ] || [ "$(cat "$dir/node_modules/.mbskills.stamp")" != "$want" ]; then
        say "installing the agent clients pinned in tests/clients/package-lock.json (about 1.4 GB)"
        before="$(mktemp)"
        cp "$dir/package-lock.json" "$before"
        if ! (cd "$dir" && npm install --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null); then
            cp "$before" "$dir/package-lock.json"
            rm -f "$before"
            say "npm install of tests/clients failed (see the lines above); MBSKILLS_SKIP_CLIENTS=1 skips the client tests"
            exit 2
        fi
        if ! (cd "$dir" && npm rebuild @anthropic-ai/claude-code opencode-ai --loglevel=error >/dev/null); then
            rm -f "$before"
            say "the postinstall of Claude Code or opencode failed in tests/clients (see the lines above)"
            exit 2
        fi
        if ! cmp -s "$before" "$dir/package-lock.json"; then
            cp "$before" "$dir/package-lock.json"
            rm -f "$before"
            say "tests/clients/package-lock.json does not match tests/clients/package.json (npm wanted to change it); regenerate it with 'npm install --package-lock-only --ignore-scripts' there"
            exit 2
        fi
        rm -f "$before"
        echo "$want" >"$dir/node_modules/.mbskills.stamp"
    fi
    # opencode's skill tool runs ripgrep.
    if ! command -v rg >/dev/null 2>&1; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            say "installing ripgrep (opencode's skill tool needs rg)"
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends ripgrep >/dev/null 2>&1 \
                || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends ripgrep >/dev/null 2>&1; } \
                || { say "could not install ripgrep; install it ('apt-get install ripgrep') or set MBSKILLS_SKIP_CLIENTS=1"; exit 2; }
        else
            say "opencode's skill tool needs rg: install ripgrep ('apt-get install ripgrep'), or set MBSKILLS_SKIP_CLIENTS=1"
            exit 2
        fi
    fi
    export MBSKILLS_REQUIRE_CLIENTS=1
}

main() {
    local cmd="${1:-main}"
    [ $# -gt 0 ] && shift
    drop_stale_venv
    ensure_venv
    case "$cmd" in
        main)
            ensure_deps
            cd "$ROOT"
            "$VENV/bin/mbskills" validate "$ROOT"
            "$VENV/bin/mbskills" check --out "$ROOT/out/claims"
            "$VENV/bin/mbskills" mutate --out "$ROOT/out/mutate"
            "$VENV/bin/mbskills" drift --out "$ROOT/out/drift"
            # Install into each real agent client and see it read the skills (docs/clients.md).
            ensure_clients
            "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/test_clients_harness.py tests/test_client_*.py
            run_evals
            ;;
        test)
            ensure_deps
            ensure_browser
            ensure_gateway_venv
            ensure_clients
            cd "$ROOT"
            "$VENV/bin/python" -m pytest -q "$@"
            ;;
        bench)
            ensure_deps
            ensure_bench_venv
            cd "$ROOT"
            "$VENV/bin/python" bench/perf.py --inspect-python "$ROOT/.venv-bench/bin/python" "$@"
            ;;
        bench-agents)
            ensure_deps
            ensure_clients
            cd "$ROOT"
            "$VENV/bin/python" bench/agents.py "$@"
            ;;
        *)
            say "unknown command '$cmd' (use: bash run.sh | bash run.sh test | bash run.sh bench | bash run.sh bench-agents)"
            exit 2
            ;;
    esac
}

main "$@"
