"""Native mode, the student sampling its own completions: its rollout source, records and validation."""
