"""kconvert/hub/upload.py's one-line errors (issue #30: survivors of its mutation run), built from huggingface_hub's
own error classes and httpx responses: the status a Hub answer carries decides the hint. In-process, no network."""
from __future__ import annotations

import pytest

httpx = pytest.importorskip("httpx")
hf_errors = pytest.importorskip("huggingface_hub.errors")

from kconvert.hub.upload import _hub_error  # noqa: E402

TOKEN_HINT = "set HF_TOKEN to a token with write access to the namespace (or run `hf auth login`)"
NET_HINT = "is the Hub reachable from here? (HF_ENDPOINT, proxy settings)"


def _http(status: int, text: str, cls=None):
    """The error huggingface_hub raises for a Hub answer of `status` (HfHubHTTPError carries the httpx response)."""
    r = httpx.Response(status, request=httpx.Request("POST", "http://hub.invalid/api/repos/create"))
    return (cls or hf_errors.HfHubHTTPError)(text, response=r)


@pytest.mark.parametrize("status, text", [(401, "401 Client Error: Unauthorized"), (403, "403 Client Error: Forbidden")])
def test_an_auth_answer_gets_the_token_hint(status, text):
    """Expected: 401 and 403 are HTTP's 'not authenticated' and 'not allowed' (RFC 9110 15.5.2, 15.5.4): a token
    problem; the line quotes the error's first line."""
    e = _hub_error(_http(status, text + "\n\nRequest ID: abc"), "me/x")
    assert (e.message, e.hint) == (f"push to me/x failed: {text}", TOKEN_HINT)


def test_repository_not_found_gets_the_token_hint():
    """Expected: the Hub answers 404 for a private repository the token cannot see (huggingface_hub's
    RepositoryNotFoundError says so: 'make sure you are authenticated'); status 404 alone is not an auth status."""
    e = _hub_error(_http(404, "404 Client Error. Repository Not Found", hf_errors.RepositoryNotFoundError), "me/x")
    assert (e.message, e.hint) == ("push to me/x failed: 404 Client Error. Repository Not Found", TOKEN_HINT)


def test_another_hub_http_error_has_no_hint():
    """Expected: a 500 came from the Hub, so the Hub was reachable and no token fixes it: no hint."""
    e = _hub_error(_http(500, "500 Server Error"), "me/x")
    assert (e.message, e.hint) == ("push to me/x failed: 500 Server Error", None)


def test_a_network_error_gets_the_reachability_hint_and_not_its_cause():
    """Expected: an OSError (connection refused, DNS) never reached the Hub; its own line is the message, and a
    __cause__ of a non-RuntimeError is not appended."""
    try:
        try:
            raise ValueError("inner detail")
        except ValueError as inner:
            raise ConnectionRefusedError(111, "Connection refused") from inner
    except ConnectionRefusedError as outer:
        e = _hub_error(outer, "me/x")
    assert (e.message, e.hint) == ("push to me/x failed: [Errno 111] Connection refused", NET_HINT)


def test_a_failed_large_file_upload_says_why_with_the_hint_of_its_cause():
    """Expected: huggingface_hub wraps a failed LFS upload in RuntimeError("Error while uploading '<file>' to the
    Hub.") raised from the HTTP error; the line joins both (its final period dropped) and the 403 of the cause
    decides the hint."""
    try:
        raise RuntimeError("Error while uploading 'model.safetensors' to the Hub.") from _http(
            403, "403 Client Error: Forbidden")
    except RuntimeError as wrapped:
        e = _hub_error(wrapped, "me/x")
    assert e.message == ("push to me/x failed: Error while uploading 'model.safetensors' to the Hub: "
                         "403 Client Error: Forbidden")
    assert e.hint == TOKEN_HINT
    try:
        raise RuntimeError("..upload of shard X.") from ConnectionResetError(104, "Connection reset by peer")
    except RuntimeError as wrapped:
        e = _hub_error(wrapped, "me/x")
    assert (e.message, e.hint) == ("push to me/x failed: ..upload of shard X: [Errno 104] Connection reset by peer",
                                   NET_HINT)


def test_a_runtime_error_without_a_cause_is_quoted_as_it_is():
    """Expected: nothing to join; the text keeps its period; not an HTTP error, so the reachability hint."""
    e = _hub_error(RuntimeError("boom."), "me/x")
    assert (e.message, e.hint) == ("push to me/x failed: boom.", NET_HINT)


def test_upload_calls_the_hub_api_with_the_branch_the_token_and_the_bound_files(tmp_path, monkeypatch):
    """Expected, by hand from huggingface_hub's HfApi API: create_repo(exist_ok=True) so an existing repository is
    no error; create_branch only for a revision other than main; one create_commit whose description lists the
    bound files' sha256 (here hashlib's), no pull request unless asked; progress from 0 to the bytes sent, the files'
    sizes plus the card's UTF-8 bytes (6 + 6 + len('cärd'.encode()) = 17)."""
    import hashlib

    import huggingface_hub
    from kconvert.hub import upload as up
    from kconvert.hub.binding import LocalFile

    calls = []
    fail: dict = {}

    def spy(name):
        def f(self, *a, **k):
            calls.append((name, self.token, a, k))
            if fail.get(name):
                raise fail[name]
            return type("Info", (), {"commit_url": "https://hub/c/o", "oid": "o", "pr_url": "https://hub/pr/1"})()
        return f

    for name in ("create_repo", "create_branch", "create_commit"):
        monkeypatch.setattr(huggingface_hub.HfApi, name, spy(name))
    w, c = tmp_path / "model.safetensors", tmp_path / "kconvert.json"
    w.write_bytes(b"weight")
    c.write_bytes(b"extras")
    sha = hashlib.sha256(b"weight").hexdigest()
    sha_c = hashlib.sha256(b"extras").hexdigest()
    files = [LocalFile("model.safetensors", w, 6, sha, True), LocalFile("config.json", c, 6, sha_c, True)]
    progress = []
    done = up.upload("me/x", files, "cärd", commit_message="m", revision="dev", private=True, token="hf_t",
                     on_upload=lambda d, t: progress.append((d, t)))
    assert (done.url, done.oid, done.pr_url) == ("https://hub/c/o", "o", "https://hub/pr/1")
    assert [(n, t) for n, t, _, _ in calls] == [("create_repo", "hf_t"), ("create_branch", "hf_t"),
                                                ("create_commit", "hf_t")]
    assert calls[0][2:] == (("me/x",), {"private": True, "exist_ok": True, "repo_type": None})
    assert calls[1][2:] == (("me/x",), {"branch": "dev", "exist_ok": True, "repo_type": None})
    _, _, (repo, ops), k = calls[2]
    assert repo == "me/x" and [op.path_in_repo for op in ops] == ["model.safetensors", "config.json", "README.md"]
    assert k == {"commit_message": "m", "revision": "dev", "create_pr": False, "repo_type": None,
                 "commit_description": "Files bound to a passing `kconvert verify` report by sha256:\n\n"
                                       f"- model.safetensors: {sha}\n- config.json: {sha_c}"}
    assert progress == [(0, 17), (17, 17)]
    calls.clear()
    up.upload("me/x", files, "c", commit_message="m", revision="main", repo_type="dataset", bound_by="the trace")
    assert [n for n, _, _, _ in calls] == ["create_repo", "create_commit"]
    assert calls[0][3]["repo_type"] == "dataset" and calls[1][3]["repo_type"] == "dataset"
    assert calls[1][3]["commit_description"].startswith("Files bound to the trace by sha256:")
    calls.clear()
    up.upload("me/x", files, "c", commit_message="m", revision="dev", repo_type="dataset")
    assert calls[1][0] == "create_branch" and calls[1][3]["repo_type"] == "dataset"

    # errors: a Hub answer becomes one line naming the repository; a RuntimeError is one only with a Hub cause
    from kconvert.errors import InputError
    fail["create_repo"] = _http(401, "401 Client Error: Unauthorized")
    with pytest.raises(InputError) as ei:
        up.upload("me/x", files, "c", commit_message="m")
    assert (ei.value.message, ei.value.hint) == ("push to me/x failed: 401 Client Error: Unauthorized", TOKEN_HINT)
    fail.clear()
    try:
        raise RuntimeError("Error while uploading 'config.json' to the Hub.") from _http(500, "500 Server Error")
    except RuntimeError as wrapped:
        fail["create_commit"] = wrapped
    with pytest.raises(InputError) as ei:
        up.upload("me/x", files, "c", commit_message="m")
    assert ei.value.message == "push to me/x failed: Error while uploading 'config.json' to the Hub: 500 Server Error"
    fail["create_commit"] = RuntimeError("a bug, not the Hub")
    with pytest.raises(RuntimeError, match="a bug, not the Hub"):
        up.upload("me/x", files, "c", commit_message="m")
