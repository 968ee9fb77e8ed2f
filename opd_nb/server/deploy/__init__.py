"""Deployments: the manager that runs each served model as a process of its own, its base-model endpoints, its restarts."""
