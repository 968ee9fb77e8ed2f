"""Where coding agents work: `opd mcp`, a Model Context Protocol server over the same core calls as `opd`.

Built on the official ``mcp`` SDK (the `mcp` extra), imported only by `opd mcp`. Tools mirror the verbs
with typed inputs and structured outputs; a paid action is two calls joined by a short-lived,
single-use confirmation token (:mod:`opd_nb.agent.consent`); resources carry what an agent reads
rather than calls. The skill that teaches the workflow is ``skills/opd-nb/SKILL.md``.
"""
