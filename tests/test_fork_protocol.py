"""The fork server's messages are typed on both ends: each line parses as exactly one message.

The launcher writes :class:`SpawnRequest` lines and reads replies through ``REPLY``; the fork server
reads requests and writes replies. A request that would not survive the trip (an environment value
that is not text) is refused where it is built, naming the field, instead of reaching the child.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from opd_nb.server.fork_protocol import REPLY, Exited, Ready, Spawned, SpawnFailed, SpawnRequest


def _request(**change: object) -> SpawnRequest:
    fields: dict[str, object] = {
        "id": 3,
        "module": "opd_nb.server.worker",
        "args": ["--job", "ft-1"],
        "env": {"PATH": "/usr/bin"},
        "cwd": "/tmp",
        "log": "/tmp/job.log",
        "title": "opd-job ft-1",
    }
    return SpawnRequest.model_validate({**fields, **change})


def test_a_request_crosses_the_pipe_unchanged() -> None:
    request = _request()
    line = request.line()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert SpawnRequest.model_validate_json(line) == request


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        (Ready(ready=41), Ready),
        (Spawned(id=3, pid=42), Spawned),
        (SpawnFailed(id=3, error="cannot open /x: denied"), SpawnFailed),
        (SpawnFailed(error="the fork server exited"), SpawnFailed),
        (Exited(exited=42, code=-15), Exited),
    ],
)
def test_each_reply_parses_as_its_own_kind(
    message: Ready | Spawned | SpawnFailed | Exited, kind: type
) -> None:
    parsed = REPLY.validate_json(message.line())
    assert type(parsed) is kind
    assert parsed == message


def test_the_wire_shapes_are_the_documented_ones() -> None:
    assert Ready(ready=41).line() == b'{"ready":41}\n'
    assert Spawned(id=3, pid=42).line() == b'{"id":3,"pid":42}\n'
    assert SpawnFailed(id=3, error="no").line() == b'{"id":3,"error":"no"}\n'
    assert Exited(exited=42, code=1).line() == b'{"exited":42,"code":1}\n'


def test_a_request_with_a_non_text_environment_value_is_refused_where_it_is_built() -> None:
    with pytest.raises(ValidationError) as caught:
        _request(env={"OMP_NUM_THREADS": 2})
    assert caught.value.errors()[0]["loc"] == ("env", "OMP_NUM_THREADS")


def test_a_line_of_no_known_kind_is_an_error_not_a_guess() -> None:
    with pytest.raises(ValidationError):
        REPLY.validate_json(b'{"id":3}\n')
