"""Reward function: scores each student answer against the ground truth."""
