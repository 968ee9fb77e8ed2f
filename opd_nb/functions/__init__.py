"""A user's reward and rollout functions: run as the cloud runs them, called, tested, and remembered as entities."""
