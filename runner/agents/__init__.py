"""Running eval cases through the real agent clients (Codex CLI, Claude Code, Gemini CLI,
Qwen Code, opencode): one headless session per record in a workspace of its own, read back
from the client's JSON event stream. The run stage decides what a workspace holds per
condition; this package knows the clients."""

from .clients import AGENT_CLIENTS, AgentClient, Endpoint
from .session import Agent, Session, Workspace, skill_reads
from .streams import Call, Transcript

__all__ = ["AGENT_CLIENTS", "Agent", "AgentClient", "Call", "Endpoint", "Session", "Transcript", "Workspace", "skill_reads"]
