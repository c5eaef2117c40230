"""Workspace policy: path resolution and denial, special files, binary and non-UTF-8 content,
secrets, size caps, and redaction."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from context_os.errors import FileUnreadable, InputError, PathDenied
from context_os.files import Workspace

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))


def test_relative_and_absolute_paths_inside_resolve_to_the_real_path(root: Path, ws: Workspace) -> None:
    (root / "src").mkdir()
    (root / "src" / "a.py").write_text("x = 1\n")
    assert ws.resolve("src/a.py") == root.resolve() / "src" / "a.py"
    assert ws.resolve(root / "src" / "a.py") == ws.resolve("./src/../src/a.py")
    assert ws.relpath(ws.resolve("src/a.py")) == "src/a.py"


@pytest.mark.parametrize("path", ["/etc/passwd", "../outside.txt", "src/../../outside.txt"])
def test_paths_outside_the_workspace_are_denied(ws: Workspace, path: str) -> None:
    with pytest.raises(PathDenied, match="outside the workspace"):
        ws.resolve(path)


def test_denial_comes_before_existence_so_nothing_leaks(ws: Workspace) -> None:
    with pytest.raises(PathDenied):
        ws.resolve("/no/such/dir/file.txt")


def test_a_symlink_escaping_the_workspace_is_denied(tmp_path: Path, root: Path, ws: Workspace) -> None:
    secret = tmp_path / "outside.txt"
    secret.write_text("not yours")
    (root / "link.txt").symlink_to(secret)
    (root / "linkdir").symlink_to(tmp_path)
    with pytest.raises(PathDenied, match="resolves through a symlink"):
        ws.resolve("link.txt")
    with pytest.raises(PathDenied, match="symlink"):
        ws.resolve("linkdir/outside.txt")


def test_a_symlink_inside_the_workspace_is_fine(root: Path, ws: Workspace) -> None:
    (root / "real.txt").write_text("hi")
    (root / "alias.txt").symlink_to(root / "real.txt")
    assert ws.resolve("alias.txt") == ws.resolve("real.txt")


def test_allow_outside_lists_extra_directories(tmp_path: Path, root: Path) -> None:
    extra = tmp_path / "shared"
    extra.mkdir()
    (extra / "notes.md").write_text("shared notes")
    ws = Workspace(root, allow_outside=[extra])
    path = ws.resolve(extra / "notes.md")
    assert ws.relpath(path) == str(path)  # shown absolute: it is not under the root
    with pytest.raises(PathDenied, match="allowed directories"):
        ws.resolve(tmp_path / "other.txt")


def test_a_symlink_loop_is_a_clear_error(root: Path, ws: Workspace) -> None:
    (root / "loop1").symlink_to(root / "loop2")
    (root / "loop2").symlink_to(root / "loop1")
    with pytest.raises(FileUnreadable, match="symlink loop"):
        ws.resolve("loop1")
    with pytest.raises(FileUnreadable, match="symlink loop"):
        ws.resolve("loop1/child.txt", must_exist=False)


def test_missing_files_directories_and_fifos_are_unreadable(root: Path, ws: Workspace) -> None:
    with pytest.raises(FileUnreadable, match="no such file"):
        ws.resolve("nope.txt")
    (root / "d").mkdir()
    with pytest.raises(FileUnreadable, match="directory"):
        ws.snapshot(ws.resolve("d"))
    os.mkfifo(root / "pipe")
    with pytest.raises(FileUnreadable, match="FIFO"):  # and it must not block waiting for a writer
        ws.snapshot(ws.resolve("pipe"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode; the FIFO test covers blocking")
def test_permission_denied_is_unreadable(root: Path, ws: Workspace) -> None:
    f = root / "locked.txt"
    f.write_text("secret")
    f.chmod(0)
    try:
        with pytest.raises(FileUnreadable, match="permission denied"):
            ws.snapshot(ws.resolve("locked.txt"))
    finally:
        f.chmod(0o644)


def test_binary_files_are_metadata_only_with_size_mime_and_hash(root: Path, ws: Workspace) -> None:
    (root / "logo.png").write_bytes(PNG)
    snap = ws.snapshot(ws.resolve("logo.png"))
    assert snap.binary is True and snap.text is None
    assert snap.mime == "image/png" and snap.size == len(PNG)
    assert snap.sha is not None and snap.sha.startswith("b3:")
    assert "binary file" in (snap.omitted or "")


def test_non_utf8_text_is_decoded_with_replacements_and_says_so(root: Path, ws: Workspace) -> None:
    (root / "latin1.txt").write_bytes("café crème\n".encode("latin-1"))
    snap = ws.snapshot(ws.resolve("latin1.txt"))
    assert snap.binary is False and snap.text == "caf\ufffd cr\ufffdme\n"
    assert snap.replaced == 2 and "2 undecodable" in (snap.encoding or "")
    (root / "noise.bin").write_bytes(bytes(range(128, 256)) * 4)  # no NUL, but not text at all
    assert ws.snapshot(ws.resolve("noise.bin")).binary is True


def test_secret_files_are_metadata_only_unless_allowed(root: Path) -> None:
    for name in (".env", "server.pem", "id_rsa", "prod.key", ".env.production"):
        (root / name).write_text("API_KEY=abc123def456ghi789\n")
    (root / ".env.example").write_text("API_KEY=\n")
    ws = Workspace(root)
    for name in (".env", "server.pem", "id_rsa", "prod.key", ".env.production"):
        snap = ws.snapshot(ws.resolve(name))
        assert snap.secret and snap.text is None and snap.sha is None, name
    assert not ws.snapshot(ws.resolve(".env.example")).secret
    allowed = Workspace(root, allow_secrets=True)
    assert allowed.snapshot(allowed.resolve(".env")).text is not None


def test_discovery_never_reads_the_file(root: Path, ws: Workspace) -> None:
    (root / "big.log").write_text("x" * 1000)
    snap = ws.snapshot(ws.resolve("big.log"), read=False)
    assert snap.mode == "metadata" and snap.sha is None and snap.size == 1000


def test_files_over_the_byte_cap_are_metadata_only(root: Path) -> None:
    (root / "huge.txt").write_text("y" * 5000)
    ws = Workspace(root, max_file_bytes=4096)
    snap = ws.snapshot(ws.resolve("huge.txt"))
    assert snap.mode == "metadata" and "too large" in (snap.omitted or "")


def test_a_file_that_grows_past_the_byte_cap_while_it_is_read_is_metadata_only(root: Path) -> None:
    """The cap was checked on the ``fstat`` of the opened file only: a log that grew after it was
    read whole (a file written without end, for ever), and stored over the cap."""
    (root / "app.log").write_text("start\n")
    ws = Workspace(root, max_file_bytes=4096)
    with ws.open(ws.resolve("app.log")) as opened:
        with open(root / "app.log", "a") as log:  # written to after the open, before the read
            log.write("line\n" * 10_000)
        snap, data = ws.look(opened)
        assert snap.mode == "metadata" and data is None and snap.text is None and snap.sha is None
        assert snap.size == 50_006 and snap.omitted == "too large to store (50,006 bytes; the cap is 4,096)"
        assert opened.fd is not None
        os.lseek(opened.fd, 0, os.SEEK_SET)
        assert len(opened.read(limit=4096)) == 4097  # one byte over says there is more, no more is read


def test_bad_workspace_settings_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a directory"):
        Workspace(tmp_path / "missing")
    with pytest.raises(InputError):
        Workspace(tmp_path, max_active_chars=0)


# --- redaction (the redactor itself: tests/test_redact.py) ----------------------------------------

KEYS = {
    "openai-key": "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z",
    "anthropic-key": "sk-ant-api03-" + "Zy9xWv8uTs7rQp6oNm5lKj4iHg3fEd2c",
    "aws-access-key": "AKIA" + "IOSFODNN7EXAMPLE",
    "github-token": "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "slack-token": "xoxb-" + "123456789012-1234567890123-abcdefABCDEF",
}


@pytest.mark.parametrize("name", sorted(KEYS))
def test_the_workspace_redacts_known_key_shapes(ws: Workspace, name: str) -> None:
    text, n = ws.redact(f"export TOKEN_VALUE_{name}={KEYS[name]} # set")
    assert n == 1 and text == f"export TOKEN_VALUE_{name}=[REDACTED:{name}] # set"


def test_workspace_redaction_takes_extra_patterns_and_can_leave_out_the_contextual_rules(root: Path) -> None:
    ws = Workspace(root, redact_patterns={"ticket": r"TICKET-\d+"}, redact_generic=False)
    assert ws.redact(f"TICKET-42 {KEYS['github-token']} password is hunter2-Secret") == (
        "[REDACTED:ticket] [REDACTED:github-token] password is hunter2-Secret",
        2,
    )


def test_the_hash_of_a_file_with_a_secret_redacted_is_of_the_text_as_redacted(ws: Workspace, root: Path) -> None:
    """The store held the redacted text and the blake3 of the bytes on disk beside it: anyone
    holding the store could test guesses of what was redacted against that hash (a weak password
    found in seconds). Such a file's hash is now of its text as redacted, as stored."""
    import blake3

    raw = f'DB_HOST = "db"\nGITHUB = "{KEYS["github-token"]}"\n'
    (root / "settings.py").write_text(raw)
    snap = ws.snapshot(root / "settings.py")
    assert snap.redacted == 1 and snap.text is not None and KEYS["github-token"] not in snap.text
    assert snap.sha == "b3r:" + blake3.blake3(snap.text.encode()).hexdigest()
    assert snap.sha != "b3:" + blake3.blake3(raw.encode()).hexdigest()
    (root / "plain.py").write_text("x = 1\n")  # nothing redacted: the bytes' own hash
    assert ws.snapshot(root / "plain.py").sha == "b3:" + blake3.blake3(b"x = 1\n").hexdigest()


@pytest.mark.parametrize("bad", ["\x00", "ok\x00/../x"])
def test_a_root_no_system_call_takes_is_bad_input(tmp_path: Path, bad: str) -> None:
    with pytest.raises(InputError, match="not a valid path"):
        Workspace(bad)
    with pytest.raises(InputError, match="not a valid path"):
        Workspace(tmp_path, allow_outside=[bad])
