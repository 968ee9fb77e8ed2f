"""Rollout function: drives multi-turn generation with tools (Agentic OPD)."""
