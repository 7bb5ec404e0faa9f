"""Every default a command has, once: the stages use these constants and the CLI's help
text shows them."""

TIMEOUT_S = 120.0  # seconds per model request
MAX_RETRIES = 4  # the SDK's own retries per request
RATE_LIMIT_ROUNDS = 6  # further waits on HTTP 429 once the SDK gives up
RATE_LIMIT_DEADLINE_S = 600.0  # all those waits of one request together
JOBS = 8  # records (eval) or judge requests (grade, calibrate) in flight
TRIALS = 1
MAX_TURNS = 8  # requests per record before the tool loop stops
AGENTS = ("api", "codex", "claude-code", "gemini-cli", "qwen-code", "opencode")  # eval --agent
AGENT_TIMEOUT_S = 600.0  # seconds for one agent-client session (eval --agent)
CONDITIONS = "baseline,skills"
JUDGE_TEMPERATURE = "0"  # a number, or "omit" for models that refuse one
JUDGE_MAX_TOKENS = 2048
RESAMPLES = 10000  # bootstrap resamples
MIN_CASES = 10  # counted cases a gate on a pass rate or an uplift needs
MIN_KAPPA = 0.6  # a judge's kappa on a held-out set before its verdicts decide a gate
SEED = 0  # bootstrap seed
SKILLS_CLIENT = "agents"  # install and verify: .agents/skills, read by Codex, Gemini CLI, Qwen Code and opencode
CLAIMS_OUT = "out/claims"
MUTATE_OUT = "out/mutate"
MIN_KILL = 0.95  # share of non-equivalent mutants each skill's checks must kill
MUTANTS_ALLOW = "evals/equivalent-mutants.yaml"
DRIFT_OUT = "out/drift"
DRIFT_RELEASES = "0.6.2,0.6.0,0.5.1,0.5.0"


def cache_home() -> "Path":
    """~/.cache/mbskills, or under $XDG_CACHE_HOME when set: every cache mbskills keeps
    (responses, release layers, judge calibrations) lives below it."""
    import os
    from pathlib import Path

    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mbskills"
