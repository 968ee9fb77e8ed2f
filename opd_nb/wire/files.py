"""Dataset files: the upload answer (under ``data``, as dashscope reads ``POST /files``), list, get, delete."""

from __future__ import annotations

from opd_nb.wire.base import Wire


class FileEntry(Wire):
    file_id: str
    name: str | None = None
    bytes: int | None = None
    lines: int | None = None  # JSON Lines rows
    purpose: str | None = None
    description: str | None = None
    created_at: str | None = None


class FileListing(Wire):
    files: list[FileEntry] = []
    total: int = 0
    page_no: int | None = None
    page_size: int | None = None


class UploadedFile(Wire):
    file_id: str
    name: str | None = None
    bytes: int | None = None
    lines: int | None = None


class FailedUpload(Wire):
    """A file that was not stored, and why (not UTF-8 JSON Lines, one object per line)."""

    name: str
    reason: str


class UploadResult(Wire):
    uploaded_files: list[UploadedFile] = []
    failed_uploads: list[FailedUpload] = []


class UploadAnswer(Wire):
    """``POST /files`` answers under ``data`` (the SDK maps it to ``output``)."""

    request_id: str
    data: UploadResult


class FileStatus(Wire):
    file_id: str
    status: str
