"""Every process the control plane starts for a job, a function instance or a deployment, found and ended.

Why an environment tag: a worker killed with SIGKILL leaves its function servers behind, re-parented
to init, where no parent/child walk finds them, and a pid alone may belong to someone else by the
next restart. So each process tree we start carries ``OPD_PROCESS_OWNER=<data-dir digest>:<owner>``
in its environment; children inherit it (``FunctionServer`` and ``subprocess`` copy
``os.environ``), and ``psutil`` reads it back from any live process of ours. Owners are strings
such as ``job:<job_id>``, ``instance:<instance_id>`` or ``deployment:<id>``.

The API, for every kind of process tree:

* ``child_env(data_dir, owner, base=None)``: the environment to start the tree's root with
  (``base`` or ``os.environ`` plus the tag). That is the whole registration: nothing to write down,
  and a restarted server finds the tree even if the database never heard of it.
* ``members(data_dir, owner=None)``: its live processes (``owner=None``: every tree of the data dir).
* ``end(data_dir, owner=None, grace_s=...)``: SIGTERM them all, SIGKILL what is left after
  ``grace_s``; returns how many there were. Cancel, stop, crash and restart all call it.
* ``reap_previous_run(data_dir)``: at startup, end every tree a previous server of this data dir left.

A root forked by the fork server (:mod:`opd_nb.server.forkserver`) cannot change what
``/proc/PID/environ`` says (the fork server's own tag), so it carries its tag at the head of its
process title (:func:`title`), which is read first.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

import psutil

from opd_nb import settings

OWNER_VAR = settings.PROCESS_OWNER.name
GRACE_S = 3.0


def job_owner(job_id: str) -> str:
    return f"job:{job_id}"


def instance_owner(instance_id: str) -> str:
    return f"instance:{instance_id}"


def _prefix(data_dir: str | Path) -> str:
    digest = hashlib.sha256(str(Path(data_dir).expanduser().resolve()).encode()).hexdigest()[:16]
    return f"{digest}:"


def tag(data_dir: str | Path, owner: str) -> str:
    """The value of ``OPD_PROCESS_OWNER`` for ``owner``'s processes under ``data_dir``."""
    return _prefix(data_dir) + owner


def child_env(data_dir: str | Path, owner: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for the root of ``owner``'s process tree (registers the tree)."""
    env = dict(os.environ if base is None else base)
    env[OWNER_VAR] = tag(data_dir, owner)
    return env


def title(argv: list[str], env: Mapping[str, str]) -> str:
    """The process title of a tree's root forked by the fork server, whose ``/proc/PID/environ`` is the
    fork server's: the tag leads (a title too long for its space is cut at the end), the command follows."""
    return f"{OWNER_VAR}={settings.PROCESS_OWNER.raw(env)} " + " ".join(argv)


def _tag_of(proc: psutil.Process) -> str | None:
    cmdline = proc.cmdline()
    head = cmdline[0].split(" ", 1)[0] if cmdline else ""
    if head.startswith(OWNER_VAR + "="):
        return head[len(OWNER_VAR) + 1 :]
    return settings.PROCESS_OWNER.raw(proc.environ())


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def members(data_dir: str | Path, owner: str | None = None) -> list[psutil.Process]:
    """Live processes tagged for ``owner`` (every owner of ``data_dir`` when None); never this process."""
    want = tag(data_dir, owner) if owner is not None else None
    prefix = _prefix(data_dir)
    me = os.getpid()
    found: list[psutil.Process] = []
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            value = _tag_of(proc)
        except (psutil.Error, OSError):
            continue  # gone, a zombie, or not ours to read
        if value is not None and (value == want if want is not None else value.startswith(prefix)):
            found.append(proc)
    return found


def end(data_dir: str | Path, owner: str | None = None, grace_s: float = GRACE_S) -> int:
    """End ``owner``'s whole tree (every tree of ``data_dir`` when None): TERM, then KILL after ``grace_s``."""
    procs = members(data_dir, owner)
    for proc in procs:
        try:
            proc.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=5)
    return len(procs)


def reap_previous_run(data_dir: str | Path) -> int:
    """At startup: no process of this data dir may outlive the server that started it."""
    return end(data_dir, None, grace_s=2.0)
