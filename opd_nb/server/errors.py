"""Errors the control plane answers with, in the SDK's error body ``{request_id, code, message}``."""

from __future__ import annotations


class ApiError(Exception):
    """A 4xx answer for a bad request: the status, Bailian-style code and a message for a person."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
