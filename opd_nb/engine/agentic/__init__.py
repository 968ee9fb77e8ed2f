"""Agentic mode, the user's rollout function driving the student: its source, endpoint, calls and records."""
