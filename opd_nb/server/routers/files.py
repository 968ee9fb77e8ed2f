"""Dataset files: ``POST /files`` (multipart, answered under ``data`` as the SDK expects), list, get, delete.

An upload must be UTF-8 JSON Lines, one object per line; a file that is not is reported under
``failed_uploads`` (the cloud's shape) instead of being stored. A file name that cannot be one here
(``..``, a control character, over 200 characters) refuses the whole request with a 400 before
anything is written, and each file lands in ``files/<id>/`` by one rename, so nothing partial stays.
"""

from __future__ import annotations

import json
import secrets
import shutil
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, File, Form, Request, UploadFile

from opd_nb.constants import DELETED
from opd_nb.server.decoding import has_surrogate
from opd_nb.server.deps import PageDep, ServicesDep, StoreDep
from opd_nb.server.errors import ApiError
from opd_nb.server.function_registry import new_id
from opd_nb.server.limits import MAX_FILE_NAME_CHARS
from opd_nb.server.responses import request_id, shown
from opd_nb.server.store import Store
from opd_nb.wire.envelope import Output
from opd_nb.wire.files import (
    FailedUpload,
    FileEntry,
    FileListing,
    FileStatus,
    UploadAnswer,
    UploadedFile,
    UploadResult,
)

router = APIRouter(prefix="/api/v1/files", tags=["files"])
COPY_CHUNK_BYTES = 2**20  # an upload is copied to disk this much at a time


async def multipart_only(request: Request) -> None:
    """A clear 400 for a non-multipart upload (before the form fields are reported missing)."""
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise ApiError(400, "InvalidParameter", "POST /files takes multipart/form-data with 'files' parts")


@router.post("", dependencies=[Depends(multipart_only)])
def upload_files(
    services: ServicesDep,
    files: Annotated[list[UploadFile], File(description="JSONL datasets")],
    descriptions: Annotated[list[str] | None, Form()] = None,
    purpose: Annotated[str, Form()] = "fine-tune",
) -> UploadAnswer:
    names = [dataset_name(upload.filename) for upload in files]  # all checked before any is written
    for text in [*(descriptions or []), purpose]:
        if has_surrogate(text):
            raise ApiError(
                400, "InvalidParameter", "a form field holds a lone UTF-16 surrogate, which is not text"
            )
    done: list[UploadedFile] = []
    failed: list[FailedUpload] = []
    for i, (upload, name) in enumerate(zip(files, names, strict=True)):
        description = descriptions[i] if descriptions and i < len(descriptions) else None
        stored = _store_dataset(services.store, services.data_dir, upload, name, purpose, description)
        if isinstance(stored, UploadedFile):
            done.append(stored)
        else:
            failed.append(stored)
    return UploadAnswer(
        request_id=request_id(), data=UploadResult(uploaded_files=done, failed_uploads=failed)
    )


def dataset_name(filename: str | None) -> str:
    """The name a dataset is stored under (its base name), or a 400 if it cannot be a file name here."""
    if not filename:
        return "data.jsonl"
    name = filename.replace("\\", "/").rsplit("/", 1)[-1]
    if has_surrogate(name) or any(ord(c) < 32 or c == "\x7f" for c in name):
        raise ApiError(400, "InvalidParameter", f"file name {shown(filename)} has a control character")
    if name in ("", ".", ".."):
        raise ApiError(
            400, "InvalidParameter", f"file name {shown(filename)} names no file; send e.g. train.jsonl"
        )
    if len(name) > MAX_FILE_NAME_CHARS or len(name.encode()) > 255:
        raise ApiError(
            400,
            "InvalidParameter",
            f"file name {shown(filename, 60)} is over {MAX_FILE_NAME_CHARS} characters; use a shorter name",
        )
    return name


def _store_dataset(
    store: Store, data_dir: Path, upload: UploadFile, name: str, purpose: str, description: str | None
) -> UploadedFile | FailedUpload:
    """Save one uploaded dataset; returns its uploaded-file entry, or why it was refused.

    Streamed: the part is copied to disk in chunks and checked line by line from there, so a 300 MiB
    upload costs about one line of memory, not three copies of the file."""
    file_id = new_id("file-ft")
    folder = data_dir / "files" / file_id
    tmp = data_dir / "files" / f".tmp-{file_id}-{secrets.token_hex(4)}"
    store.begin_write(tmp, folder)  # what a kill -9 from here on leaves, the next start removes
    try:
        tmp.mkdir(parents=True)
        with open(tmp / name, "wb") as out:
            shutil.copyfileobj(upload.file, out, COPY_CHUNK_BYTES)
        problem, lines = check_jsonl_file(tmp / name)
        if problem:
            store.end_write(tmp, folder)
            return FailedUpload(name=name, reason=problem)
        size = (tmp / name).stat().st_size
        tmp.rename(folder)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        store.end_write(tmp, folder)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    store.add_file(
        file_id, name, str(folder / name), size, lines, purpose, description, finishes=(tmp, folder)
    )
    return UploadedFile(file_id=file_id, name=name, bytes=size, lines=lines)


def check_jsonl_file(path: Path) -> tuple[str | None, int]:
    """(problem, line count): a dataset must be UTF-8 JSON Lines, one object per line (read a line at a time)."""
    count, blank = 0, True
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                return "the file is not UTF-8 text", 0
            if not line.strip():
                continue
            blank = False
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                return f"line {n} is not valid JSON ({exc.msg})", count
            if not isinstance(obj, dict):
                return f"line {n} is not a JSON object", count
            count += 1
    return ("the file is empty", 0) if blank else (None, count)


def _public(row: dict[str, Any]) -> FileEntry:
    return FileEntry.model_validate({k: row[k] for k in FileEntry.model_fields})


def _existing_file(store: Store, file_id: str) -> dict[str, Any]:
    row = store.file(file_id)
    if row is None:
        raise ApiError(404, "FileNotFound", f"file {shown(file_id)} does not exist")
    return row


@router.get("")
def list_files(store: StoreDep, page: PageDep) -> Output[FileListing]:
    rows, total = store.files(page.offset, page.page_size)
    listing = FileListing(
        files=[_public(r) for r in rows], total=total, page_no=page.page_no, page_size=page.page_size
    )
    return Output[FileListing].of(listing)


@router.get("/{file_id}")
def get_file(file_id: str, store: StoreDep) -> Output[FileEntry]:
    return Output[FileEntry].of(_public(_existing_file(store, file_id)))


@router.delete("/{file_id}")
def delete_file(file_id: str, store: StoreDep) -> Output[FileStatus]:
    row = _existing_file(store, file_id)
    store.delete_file(file_id)
    shutil.rmtree(Path(row["path"]).parent, ignore_errors=True)
    return Output[FileStatus].of(FileStatus(file_id=file_id, status=DELETED))
