"""One headless client session in a workspace of its own: a temporary git project and HOME,
the client's config pointing at the endpoint, the skills installed (or an instruction file
written) as the run's condition asks, the client run, its event stream read back, and the
workspace removed."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..core import UsageError
from ..install import destination, install
from ..load import Bundle
from .clients import AGENT_CLIENTS, KEY_VARIABLE, WIRES, AgentClient, Endpoint
from .process import Finished, base_env, inner_url, isolation_prefix, jailed, launch, open_relay, relay_target
from .streams import PARSERS, Call, Transcript

# The pinned clients, as `bash run.sh test` installs them from the project's lock.
PINNED_BIN = Path(__file__).resolve().parents[2] / "tests" / "clients" / "node_modules" / ".bin"
LOCAL_KEY = "unused-local-key"  # a local server takes any key; the clients insist on one
VERSION = re.compile(r"\d+\.\d+\.\d+[\w.+-]*")
GIT = ["git", "-c", "user.name=mbskills", "-c", "user.email=mbskills@example.invalid", "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main"]


@dataclass(frozen=True)
class Workspace:
    """What a session's project holds besides the prompt."""

    install: bool = False  # the bundle, with `mbskills install --client NAME`
    extra_skills: tuple[tuple[str, str, str], ...] = ()  # (name, description, body) written beside it
    instructions: str | None = None  # the client's instruction file (AGENTS.md, CLAUDE.md, ...)


@dataclass
class Session:
    finished: Finished
    transcript: Transcript
    activated: list[str] = field(default_factory=list)
    files_read: list[str] = field(default_factory=list)
    refused: list[dict] = field(default_factory=list)
    instruction_file: str | None = None
    evals_visible: bool = False  # an `evals/` folder was in the workspace (must never be)


def find_binary(client: AgentClient, explicit: str | None) -> Path:
    if explicit:
        path = Path(explicit).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise UsageError(f"--agent-bin {explicit}: not an executable file")
        return path.resolve()
    pinned = PINNED_BIN / client.binary
    if pinned.exists():
        return pinned
    found = shutil.which(client.binary)
    if found:
        return Path(found)
    raise UsageError(f"--agent {client.name}: `{client.binary}` not found; `bash run.sh test` installs the pinned clients ({client.package} in tests/clients), or put it on PATH, or pass --agent-bin")


def _package_version(client: AgentClient, binary: Path) -> str | None:
    """The version in the client's own npm package.json, found up from the resolved
    executable (an npm install links node_modules/.bin/NAME into its package)."""
    for folder in binary.resolve().parents:
        manifest = folder / "package.json"
        if manifest.is_file():
            try:
                data = json.loads(manifest.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return None
            if isinstance(data, dict) and data.get("name") == client.package and isinstance(data.get("version"), str):
                return data["version"]
            return None  # the nearest package is another one
    return None


def client_version(client: AgentClient, binary: Path) -> str:
    """From its package.json when it is the npm package (instant: Gemini CLI takes 1.5 s to
    print --version), else from `--version`."""
    known = _package_version(client, binary)
    if known:
        return known
    with tempfile.TemporaryDirectory(prefix="mbskills-version-") as home:
        try:
            done = subprocess.run([str(binary), "--version"], env=base_env(Path(home), binary), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise UsageError(f"--agent {client.name}: `{binary} --version` failed ({exc})") from None
    found = VERSION.search(done.stdout + done.stderr)
    if done.returncode != 0 or not found:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        raise UsageError(f"--agent {client.name}: `{binary} --version` printed no version ({tail[0]})")
    return found.group(0)


def endpoint_for(client: AgentClient, spec: str, base_url: str | None, env) -> Endpoint:
    provider, sep, model = spec.partition(":")
    if not sep or not model.strip():
        raise UsageError(f"--model {spec!r}: expected PROVIDER:MODEL ({client.title} speaks {client.provider}:MODEL)")
    if provider != client.provider:
        raise UsageError(f"--model {spec}: {client.title} speaks {client.provider}:MODEL only (it speaks {WIRES[client.wire]})")
    variable = KEY_VARIABLE[provider]
    key = env.get(variable, "").strip()
    if not key:
        if not base_url:
            raise UsageError(f"{variable} is not set: --agent {client.name} --model {spec} needs it (or --base-url for a local server)")
        key = LOCAL_KEY
    return Endpoint(provider, model.strip(), base_url, key)


class Agent:
    """A client, its endpoint and its options, ready to run sessions."""

    def __init__(self, name: str, spec: str, *, base_url: str | None = None, binary: str | None = None, isolate: bool = False, timeout_s: float = 600.0, env=os.environ):
        if name not in AGENT_CLIENTS:
            raise UsageError(f"--agent {name}: choose from api, {', '.join(AGENT_CLIENTS)}")
        self.client = AGENT_CLIENTS[name]
        self.endpoint = endpoint_for(self.client, spec, base_url, env)
        self.isolate = isolate
        self.relay = relay_target(base_url) if isolate else None
        self.prefix = isolation_prefix() if isolate else []
        self.binary = find_binary(self.client, binary)
        self.version = client_version(self.client, self.binary)
        self.timeout_s = timeout_s

    @property
    def model(self) -> str:
        return self.endpoint.model

    def identity(self) -> dict:
        """What a record's answers depend on: cache and resume keys carry the client and
        its version with the model."""
        out = {"provider": self.endpoint.provider, "model": self.endpoint.model, "agent": self.client.name, "agent_version": self.version}
        if self.endpoint.base_url:
            out["base_url"] = self.endpoint.base_url
        return out

    async def run(self, prompt: str, bundle: Bundle, workspace: Workspace, skill_names: list[str]) -> Session:
        root = Path(tempfile.mkdtemp(prefix="mbskills-agent-"))
        try:
            return await self._run(root, prompt, bundle, workspace, skill_names)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    async def _run(self, root: Path, prompt: str, bundle: Bundle, workspace: Workspace, skill_names: list[str]) -> Session:
        project, home = root / "project", root / "home"
        project.mkdir()
        home.mkdir()
        await _git(project, "init", "-q")
        await _git(project, "commit", "-q", "--allow-empty", "-m", "mbskills eval workspace")  # opencode wants a commit
        if workspace.install or workspace.extra_skills:
            dest = destination(self.client.name, user=False, project=project, home=home)
            if workspace.install:
                install(bundle, dest)
            for name, description, body in workspace.extra_skills:
                (dest / name).mkdir(parents=True, exist_ok=True)
                (dest / name / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {_yaml_string(description)}\n---\n\n{body}\n", encoding="utf-8")
        instruction_file = None
        if workspace.instructions is not None:
            instruction_file = self.client.instruction_file
            (project / instruction_file).write_text(workspace.instructions + "\n", encoding="utf-8")
        evals_visible = any(p.name == "evals" for p in project.rglob("*") if p.is_dir())
        endpoint = self.endpoint
        socket_path = root / "relay.sock"
        if self.isolate:
            endpoint = Endpoint(endpoint.provider, endpoint.model, inner_url(endpoint.base_url or ""), endpoint.key)
        env = {**base_env(home, self.binary), **self.client.configure(endpoint, home, project)}
        argv = self.client.command(self.binary, endpoint, prompt)
        relay = None
        if self.isolate:
            assert self.relay is not None
            relay = await open_relay(socket_path, *self.relay)
            argv = jailed(self.prefix, socket_path, argv)
        try:
            finished = await launch(argv, cwd=project, env=env, timeout_s=self.timeout_s)
        finally:
            if relay is not None:
                relay.close()
        transcript = PARSERS[self.client.name](finished.stdout)
        activated, files_read = skill_reads(self.client, transcript.calls, skill_names)
        refused = [{"tool": c.name, "arguments": c.arguments, "result": (c.result or "")[:500]} for c in transcript.calls if c.refused or (c.name not in self.client.allowed_tools)]
        return Session(finished, transcript, activated, files_read, refused, instruction_file, evals_visible)


def _yaml_string(text: str) -> str:
    return json.dumps(text)  # a JSON string is a YAML flow scalar


async def _git(cwd: Path, *args: str) -> None:
    process = await asyncio.create_subprocess_exec(*GIT, *args, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    _, err = await process.communicate()
    if process.returncode != 0:
        raise UsageError(f"git {' '.join(args)} failed in the eval workspace: {err.decode(errors='replace').strip()}")


def _paths_of(client: AgentClient, call: Call) -> list[str]:
    """The paths a call reads: a read tool's path arguments, or a shell command's words."""
    if call.name in client.read_tools:
        out: list[str] = []
        for key in client.read_tools[call.name]:
            value = call.arguments.get(key)
            values = value if isinstance(value, list) else [value]  # read_many_files takes a list
            out += [v for v in values if isinstance(v, str)]
        return out
    if call.name == "exec_command":  # Codex reads a skill with its shell (cat, sed, head)
        return re.findall(r"[^\s'\"]+", str(call.arguments.get("cmd", "")))
    return []


def skill_reads(client: AgentClient, calls: list[Call], skill_names: list[str]) -> tuple[list[str], list[str]]:
    """(skills activated, files read as SKILL/PATH): the client's skill tool, or a read of a
    skill's SKILL.md (which is how Codex activates one); refused calls count for nothing."""
    activated: list[str] = []
    files: list[str] = []
    names = sorted(skill_names, key=len, reverse=True)
    for call in calls:
        if call.refused or call.is_error:
            continue
        if client.skill_tool and call.name == client.skill_tool[0]:
            name = call.arguments.get(client.skill_tool[1])
            if isinstance(name, str) and name in skill_names and name not in activated:
                activated.append(name)
            continue
        for path in _paths_of(client, call):
            for name in names:
                match = re.search(rf"(?:^|/){re.escape(name)}/([^\s'\"]+)$", path)
                if match:
                    entry = f"{name}/{match.group(1)}"
                    if entry not in files:
                        files.append(entry)
                    if match.group(1) == "SKILL.md" and name not in activated:
                        activated.append(name)
                    break
    return activated, files
