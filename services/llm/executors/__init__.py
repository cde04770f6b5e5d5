"""External executors: coding agents that answer the generation steps of the profiles
claude_code, opencode, codex and acp (base.py says how one plugs in)."""
