"""The chat widget (`%opd chat NAME`) and the `opd chat`/`deploy` commands against a real `opd serve`.

The answer streams in a background thread that only sets widget state; history goes to the model
on every turn; Reset starts over; a failed turn is rolled back; the static snapshot keeps the
conversation for a saved notebook.
"""

from __future__ import annotations

import html
import json
import subprocess
import sys

import pytest
from pydantic import SecretStr

from opd_nb.client import JobClient, Target

pytestmark = pytest.mark.slow

SORT = "Sort the digits."


@pytest.fixture(scope="module")
def client(local_server):
    return JobClient(Target(kind="local", base_url=local_server.api_base, api_key=SecretStr("test")))


def test_chat_widget_streams_keeps_history_and_resets(client):
    pytest.importorskip("ipywidgets")
    from opd_nb.notebook.chat import ChatWidget

    chat = ChatWidget("qwen3-8b", client, system=SORT, temperature=0, max_tokens=24)
    box = chat.widget()
    assert box is not None and "no messages yet" not in chat.to_html()  # the system message shows
    pieces = list(
        client.chat_stream(
            "qwen3-8b",
            [{"role": "system", "content": SORT}, {"role": "user", "content": "93418"}],
            temperature=0,
            max_tokens=24,
        )
    )
    assert len(pieces) > 2  # the answer really arrives in pieces
    answer = chat.send("93418", wait=True)
    assert answer == "".join(pieces)  # greedy: the same text the stream gave
    assert [m["role"] for m in chat.messages] == ["system", "user", "assistant"]
    w = chat._ensure_widgets()
    assert html.escape(answer) in w["history"].value and not w["send"].disabled
    chat.send("5521", wait=True)
    assert [m["role"] for m in chat.messages] == ["system", "user", "assistant", "user", "assistant"]
    snapshot = chat._repr_mimebundle_()["text/html"]
    assert (
        "93418" in snapshot and "5521" in snapshot and html.escape(answer) in snapshot
    )  # the static snapshot
    chat.reset()
    assert chat.messages == [{"role": "system", "content": SORT}] and "93418" not in w["history"].value


def test_a_failed_turn_is_rolled_back_and_shown(client):
    pytest.importorskip("ipywidgets")
    from opd_nb.errors import OpdError
    from opd_nb.notebook.chat import ChatWidget

    chat = ChatWidget("no/such-model", client)
    chat.widget()
    with pytest.raises(OpdError, match="ModelNotFound"):
        chat.send("hi", wait=True)
    assert chat.messages == [] and "ModelNotFound" in chat.to_html()
    with pytest.raises(OpdError, match="empty"):
        chat.send("  ")


def test_magic_verbs_open_the_chat_widget(local_server):
    pytest.importorskip("ipywidgets")
    from opd_nb.cli import invoke
    from opd_nb.cli.intents import ChatRequest
    from opd_nb.notebook.chat import ChatWidget
    from opd_nb.notebook.views import open_view

    request = invoke(
        ["chat", "qwen3-8b", "--local", local_server.base_url, "--temperature", "0", "--max-tokens", "8"]
    )
    assert isinstance(request, ChatRequest) and request.target.base_url == local_server.api_base
    chat = open_view(request)
    assert isinstance(chat, ChatWidget) and chat.params == {"max_tokens": 8, "temperature": 0.0}
    opened = open_view(
        invoke(["chat", "qwen3-8b", "93418", "--local", local_server.base_url, "--max-tokens", "8"])
    )
    opened.wait(120)
    assert [m["role"] for m in opened.messages] == ["user", "assistant"]  # the message was sent on open


def _opd(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "opd_nb", *args], capture_output=True, text=True, timeout=timeout
    )


def test_cli_deploy_deployments_chat_undeploy(local_server):
    url = local_server.base_url
    dep = _opd("deploy", "qwen3-8b", "--suffix", "cli", "--local", url, "--json")
    assert dep.returncode == 0, dep.stderr
    info = json.loads(dep.stdout)
    assert info["deployed_model"] == "qwen3-8b-cli" and info["status"] == "RUNNING"
    listed = _opd("deployments", "--local", url)
    assert listed.returncode == 0 and "qwen3-8b-cli" in listed.stdout
    said = _opd("chat", "qwen3-8b-cli", "93418", "--system", SORT, "--temperature", "0", "--local", url)
    assert said.returncode == 0 and said.stdout.strip(), said.stderr
    chatted = subprocess.run(
        [
            sys.executable,
            "-m",
            "opd_nb",
            "chat",
            "qwen3-8b-cli",
            "--temperature",
            "0",
            "--max-tokens",
            "8",
            "--local",
            url,
        ],
        input="93418\n/reset\n5521\n\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert chatted.returncode == 0 and chatted.stdout.count("qwen3-8b-cli>") == 2, chatted.stderr
    assert "history cleared" in chatted.stderr
    gone = _opd("undeploy", "qwen3-8b-cli", "--local", url)
    assert gone.returncode == 0 and "DELETED" in gone.stdout
    after = _opd("chat", "qwen3-8b-cli", "hi", "--local", url)
    assert after.returncode == 2 and "was deleted" in after.stderr and "Traceback" not in after.stderr
