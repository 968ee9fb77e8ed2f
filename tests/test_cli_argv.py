"""`--local [URL]`: a bare flag means the default local control plane, a URL after it is taken."""

from opd_nb.cli._argv import LOCAL_DEFAULT, normalize


def test_bare_local_gets_the_default_marker():
    assert normalize(["submit", "ws", "--local"]) == ["submit", "ws", "--local", LOCAL_DEFAULT]
    assert normalize(["submit", "--local", "ws"]) == ["submit", "--local", LOCAL_DEFAULT, "ws"]
    assert normalize(["jobs", "--local", "--json"]) == ["jobs", "--local", LOCAL_DEFAULT, "--json"]


def test_local_with_url_is_left_alone():
    argv = ["submit", "ws", "--local", "http://127.0.0.1:9000/api/v1"]
    assert normalize(argv) == argv
    assert normalize(["jobs", "--local", "localhost:8765"]) == ["jobs", "--local", "localhost:8765"]
    assert normalize(["check", "ws"]) == ["check", "ws"]
