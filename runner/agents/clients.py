"""The five agent clients: where each finds its model endpoint and key, the headless
command line with the narrowest tools it offers, and the file it reads instructions from.

Every client runs with a HOME of its own whose config points at the endpoint and turns
telemetry, updates, plugins and other traffic of its own off (what each needs was found by
driving the pinned clients offline: docs/clients.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

# What each client reads its model through, and the --model provider that fits it.
WIRES = {"anthropic": "Anthropic Messages", "openai-responses": "OpenAI Responses", "gemini": "the Gemini API", "openai-chat": "OpenAI-compatible Chat Completions"}
PROVIDER_OF_WIRE = {"anthropic": "anthropic", "openai-responses": "openai", "gemini": "gemini", "openai-chat": "openai"}
DEFAULT_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com", "gemini": "https://generativelanguage.googleapis.com"}
KEY_VARIABLE = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY"}


@dataclass(frozen=True)
class Endpoint:
    provider: str  # openai, anthropic, gemini
    model: str
    base_url: str | None  # None: the client's default (the provider's own API)
    key: str


@dataclass(frozen=True)
class AgentClient:
    name: str  # the --agent name, also its `mbskills install --client` name
    title: str
    binary: str  # under node_modules/.bin, or on PATH
    package: str  # npm package, pinned in tests/clients/package-lock.json
    wire: str
    instruction_file: str  # what the client reads from the project root, for `inline`
    allowed_tools: tuple[str, ...]  # what it may run; anything else is refused
    skill_tool: tuple[str, str] | None  # (tool name, argument naming the skill)
    read_tools: dict[str, tuple[str, ...]]  # tool -> arguments that hold a path it reads
    configure: Callable[[Endpoint, Path, Path], dict[str, str]]  # (endpoint, home, project) -> environment
    command: Callable[[Path, Endpoint, str], list[str]]  # (binary, endpoint, prompt) -> argv

    @property
    def provider(self) -> str:
        return PROVIDER_OF_WIRE[self.wire]


def _url(endpoint: Endpoint) -> str:
    return endpoint.base_url or DEFAULT_URLS[endpoint.provider]


def _codex_config(endpoint: Endpoint, home: Path, project: Path) -> dict[str, str]:
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        f"model = {json.dumps(endpoint.model)}\n"
        'model_provider = "mbskills"\n'
        "check_for_update_on_startup = false\n"
        "\n[model_providers.mbskills]\n"
        'name = "mbskills endpoint"\n'
        f"base_url = {json.dumps(_url(endpoint))}\n"
        'wire_api = "responses"\n'
        'env_key = "OPENAI_API_KEY"\n'
        "\n[analytics]\nenabled = false\n"
    )  # JSON strings are TOML basic strings
    return {"CODEX_HOME": str(codex_home), "OPENAI_API_KEY": endpoint.key}


def _codex_argv(binary: Path, endpoint: Endpoint, prompt: str) -> list[str]:
    # --disable plugins: otherwise it asks a remote marketplace (git ls-remote).
    return [str(binary), "exec", "--ephemeral", "--disable", "plugins", "--json", "--sandbox", "read-only", "--", prompt]


def _claude_config(endpoint: Endpoint, home: Path, project: Path) -> dict[str, str]:
    env = {
        "ANTHROPIC_API_KEY": endpoint.key,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
    }
    if endpoint.base_url:
        env["ANTHROPIC_BASE_URL"] = endpoint.base_url  # the client adds /v1/messages
    return env


CLAUDE_TOOLS = ("Read", "Grep", "Glob", "Skill")


def _claude_argv(binary: Path, endpoint: Endpoint, prompt: str) -> list[str]:
    tools = ",".join(CLAUDE_TOOLS)  # --tools: the only built-in tools it offers the model
    return [str(binary), "-p", "--output-format", "stream-json", "--verbose", "--model", endpoint.model, "--tools", tools, "--allowedTools", tools, "--", prompt]


GEMINI_SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
}
# activate_skill is offered only when a policy allows it; headless (-p) default mode drops
# every tool that would need a confirmation (writes, the shell, web fetches).
GEMINI_POLICY = '[[rule]]\ntoolName = "activate_skill"\ndecision = "allow"\npriority = 100\n'


def _gemini_config(endpoint: Endpoint, home: Path, project: Path) -> dict[str, str]:
    config = home / ".gemini"
    (config / "policies").mkdir(parents=True, exist_ok=True)
    (config / "settings.json").write_text(json.dumps(GEMINI_SETTINGS, indent=2))
    (config / "policies" / "mbskills.toml").write_text(GEMINI_POLICY)
    env = {
        "GEMINI_API_KEY": endpoint.key,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",  # project skills load only in a trusted folder
        "GEMINI_CLI_NO_RELAUNCH": "true",  # no second node process
    }
    if endpoint.base_url:
        env["GOOGLE_GEMINI_BASE_URL"] = endpoint.base_url
    return env


def _gemini_argv(binary: Path, endpoint: Endpoint, prompt: str) -> list[str]:
    # -m: a named model keeps its router from sending classifier requests of its own.
    return [str(binary), "-m", endpoint.model, "-o", "stream-json", f"--prompt={prompt}"]


QWEN_SETTINGS = {
    "security": {"auth": {"selectedType": "openai"}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False},
    "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False},
}


def _qwen_config(endpoint: Endpoint, home: Path, project: Path) -> dict[str, str]:
    (home / ".qwen").mkdir(parents=True, exist_ok=True)
    (home / ".qwen" / "settings.json").write_text(json.dumps(QWEN_SETTINGS, indent=2))
    return {"OPENAI_BASE_URL": _url(endpoint), "OPENAI_API_KEY": endpoint.key, "OPENAI_MODEL": endpoint.model}


def _qwen_argv(binary: Path, endpoint: Endpoint, prompt: str) -> list[str]:
    # default mode: edits and the shell need an approval nobody gives headless, so they are
    # declined; the skill tool is allowed (the "auto" mode would ask a classifier first).
    return [str(binary), "--approval-mode", "default", "--allowed-tools", "skill", "-o", "stream-json", f"--prompt={prompt}"]


def _opencode_config(endpoint: Endpoint, home: Path, project: Path) -> dict[str, str]:
    config = home / ".config" / "opencode"
    config.mkdir(parents=True, exist_ok=True)
    (config / "opencode.json").write_text(json.dumps({
        "autoupdate": False,
        "share": "disabled",
        "permission": {"edit": "deny", "bash": "deny", "webfetch": "deny", "external_directory": "deny"},
        "provider": {"mbskills": {
            "npm": "@ai-sdk/openai-compatible",  # bundled: nothing is fetched at run time
            "name": "mbskills endpoint",
            "options": {"baseURL": _url(endpoint), "apiKey": "{env:OPENAI_API_KEY}"},  # the key stays off disk
            "models": {endpoint.model: {"name": endpoint.model, "tool_call": True}},
        }},
        "model": f"mbskills/{endpoint.model}",
    }, indent=2))
    return {
        "OPENAI_API_KEY": endpoint.key,
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    }


def _opencode_argv(binary: Path, endpoint: Endpoint, prompt: str) -> list[str]:
    # --title: a titled session skips the title-generation request.
    return [str(binary), "run", "--format", "json", "--title", "mbskills eval", "-m", f"mbskills/{endpoint.model}", "--", prompt]


AGENT_CLIENTS = {
    c.name: c
    for c in (
        AgentClient("codex", "Codex CLI", "codex", "@openai/codex", "openai-responses", "AGENTS.md", ("exec_command",), None, {}, _codex_config, _codex_argv),
        AgentClient("claude-code", "Claude Code", "claude", "@anthropic-ai/claude-code", "anthropic", "CLAUDE.md", CLAUDE_TOOLS, ("Skill", "skill"), {"Read": ("file_path",), "Grep": ("path",), "Glob": ("path",)}, _claude_config, _claude_argv),
        AgentClient("gemini-cli", "Gemini CLI", "gemini", "@google/gemini-cli", "gemini", "GEMINI.md", ("activate_skill", "read_file", "read_many_files", "glob", "grep_search", "list_directory"), ("activate_skill", "name"), {"read_file": ("file_path", "absolute_path"), "read_many_files": ("paths", "include")}, _gemini_config, _gemini_argv),
        AgentClient("qwen-code", "Qwen Code", "qwen", "@qwen-code/qwen-code", "openai-chat", "QWEN.md", ("skill", "read_file", "read_many_files", "glob", "grep_search", "list_directory"), ("skill", "skill"), {"read_file": ("file_path", "absolute_path"), "read_many_files": ("paths",)}, _qwen_config, _qwen_argv),
        AgentClient("opencode", "opencode", "opencode", "opencode-ai", "openai-chat", "AGENTS.md", ("skill", "read", "glob", "grep", "list", "todowrite", "task"), ("skill", "name"), {"read": ("filePath",)}, _opencode_config, _opencode_argv),
    )
}
