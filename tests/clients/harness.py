"""Driving a real agent client (from tests/clients/node_modules, installed by run.sh with
npm) headless against the scripted model server, with nothing else reachable.

Each run gets its own HOME (and XDG folders, TMPDIR) under the test's tmp_path and an
environment built from nothing, so no real key or config of the machine leaks in. The client
runs in its own network namespace (tests/clients/jail.py) whose only interface is loopback;
its 127.0.0.1:PORT is forwarded to the server's Unix socket. On timeout the whole process
group is killed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

CLIENTS = Path(__file__).resolve().parent
REPO = CLIENTS.parent.parent
BIN = CLIENTS / "node_modules" / ".bin"
JAIL = REPO / "runner" / "agents" / "jail.py"  # the runner's own, as `mbskills eval --isolate-network` uses it
PORT = 18181  # inside each client's own namespace, so never taken
# run.sh sets this once it has installed the clients: from then on a missing one fails.
REQUIRED = os.environ.get("MBSKILLS_REQUIRE_CLIENTS") == "1"


def unavailable(why: str):
    if REQUIRED:
        pytest.fail(why)
    pytest.skip(why)


def client_bin(name: str) -> Path:
    path = BIN / name
    if not path.exists():
        unavailable(f"{path} missing: `bash run.sh test` installs the clients (npm, in tests/clients)")
    return path


def _jail_prefix() -> list[str]:
    unshare = shutil.which("unshare")
    if unshare is None:
        unavailable("unshare (util-linux) not found: the client tests run each client in its own network namespace")
    flags = ["--net"] if os.geteuid() == 0 else ["--net", "--map-root-user"]
    probe = subprocess.run([unshare, *flags, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        unavailable(f"cannot make a network namespace ({probe.stderr.strip()}): the client tests need `unshare --net`")
    return [unshare, *flags]


@dataclass
class Ran:
    argv: list[str]
    rc: int | None  # None: killed on timeout
    stdout: str
    stderr: str
    seconds: float

    def describe(self) -> str:
        return f"{' '.join(self.argv[:3])}... rc={self.rc} after {self.seconds:.1f}s\n--- stdout\n{self.stdout[-4000:]}\n--- stderr\n{self.stderr[-4000:]}"


def client_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment `mbskills eval --agent` gives a client (built from nothing: a HOME
    of its own, PATH with the clients and node), plus `extra`."""
    from runner.agents.process import base_env

    return {**base_env(home, BIN / "client"), **(extra or {})}


def run_jailed(argv: list[str], *, cwd: Path, env: dict[str, str], socket_path: str, timeout: float = 120.0) -> Ran:
    """Run argv in its own network namespace; kill its process group on timeout."""
    full = [*_jail_prefix(), sys.executable, str(JAIL), str(PORT), socket_path, "--", *argv]
    started = time.monotonic()
    process = subprocess.Popen(full, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = process.communicate(timeout=timeout)
        rc = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        rc = None
    finally:
        try:  # daemons a client left behind go with its group
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return Ran(argv, rc, out, err, time.monotonic() - started)


def base_url(path: str = "") -> str:
    return f"http://127.0.0.1:{PORT}{path}"


def mbskills_install(project: Path, home: Path, *args: str) -> subprocess.CompletedProcess:
    """`mbskills install ARGS` run as a user would, from the project folder, with that HOME."""
    env = {**os.environ, "HOME": str(home)}
    env.pop("CODEX_HOME", None)
    done = subprocess.run([sys.executable, "-m", "runner.cli", "install", "--bundle", str(REPO), *args], cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


@dataclass
class Skill:
    name: str
    description: str
    body: str  # SKILL.md without its front matter


def bundle_skills() -> list[Skill]:
    import yaml

    out = []
    for path in sorted((REPO / "skills").glob("*/SKILL.md")):
        _, front, body = path.read_text("utf-8").split("---", 2)
        meta = yaml.safe_load(front)
        out.append(Skill(meta["name"], meta["description"], body))
    return out


def strings(value) -> str:
    """Every string in a request body, joined, with JSON escapes undone and whitespace
    folded: what the model was shown, whatever the wire format."""
    found: list[str] = []

    def walk(v):
        if isinstance(v, str):
            found.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(value)
    return re.sub(r"\s+", " ", "\n".join(found))


def folded(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def body_marker(skill: Skill) -> str:
    """A line of the SKILL.md body long enough to be unique to it."""
    return max((line.strip() for line in skill.body.splitlines()), key=len)


def model_requests(server, kind: str) -> list[dict]:
    return [r for r in server.requests if r["kind"] == kind]


def dump(server) -> str:
    return json.dumps([{k: r[k] for k in ("path", "kind", "stream")} for r in server.requests])


def project_and_home(root: Path, *, commit: bool = False) -> tuple[Path, Path]:
    """A project that is a git repository (clients look for skills up to its root; with
    `commit`, one that has a commit, as opencode wants for a worktree) and a HOME."""
    project, home = root / "project", root / "home"
    project.mkdir(parents=True)
    home.mkdir()
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=project, check=True)
    if commit:
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "init"], cwd=project, check=True)
    return project, home


def install_into(project: Path, home: Path, dest: Path, client: str, *flags: str) -> Path:
    """`mbskills install --client CLIENT FLAGS`, checked to have put every skill into dest,
    each a folder link with --link; returns dest."""
    done = mbskills_install(project, home, "--client", client, *flags)
    for skill in bundle_skills():
        assert (dest / skill.name / "SKILL.md").is_file(), f"install did not put {skill.name} into {dest}: {done.stdout}{done.stderr}"
        if "--link" in flags:
            assert (dest / skill.name).is_symlink(), f"--link left {dest / skill.name} without a folder link: {done.stdout}"
    return dest


def answer_only(kind, body, seen):
    """A script that never calls a tool."""
    return "No tools needed.", []


def one_skill_a_turn(tool: str, key: str):
    """A script that calls the client's skill tool ({key: NAME}) for each bundle skill in
    turn, one a turn, then answers."""
    names = [s.name for s in bundle_skills()]

    def script(kind, body, seen):
        done = seen.calls.count(tool)
        if tool in seen.tools and done < len(names):
            return "", [(tool, {key: names[done]})]
        return "Read both skills.", []

    return script
