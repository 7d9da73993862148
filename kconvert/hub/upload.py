"""The one commit that publishes a checkpoint: every file bound to the report, plus the model card, through
huggingface_hub (its HF_ENDPOINT, HF_TOKEN, proxies and retries); Hub, auth and network errors become one line."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from kconvert.errors import GateError, InputError
from kconvert.hub.binding import LocalFile
from kconvert.source.hub import one_line, transport_errors
from kconvert.source.names import README_NAME


@dataclass
class Commit:
    url: str
    oid: str
    pr_url: str | None


def upload(repo_id: str, files: list[LocalFile], card: str, *, commit_message: str, revision: str | None = None,
           create_pr: bool = False, private: bool | None = None, token: str | None = None,
           endpoint: str | None = None, on_upload: Callable[[int, int], None] | None = None,
           repo_type: str | None = None, bound_by: str = "a passing `kconvert verify` report") -> Commit:
    """Create the repository (and branch) when missing and commit `files` and the card in one commit; a file whose
    sha256 changed since `files` were hashed is refused before anything is sent (GateError). `repo_type`:
    huggingface_hub's (None: a model; "dataset" for a trace); `bound_by` names what the sha256s were checked
    against, in the commit description."""
    # deferred: huggingface_hub is ~35-120 ms of imports; only a Hub id or an upload needs it
    from huggingface_hub import CommitOperationAdd, HfApi

    api = HfApi(endpoint=endpoint, token=token)
    description = f"Files bound to {bound_by} by sha256:\n\n" + "\n".join(
        f"- {f.name}: {f.sha256}" for f in files if f.bound)
    total = sum(f.size for f in files) + len(card.encode("utf-8"))
    try:
        api.create_repo(repo_id, private=private, exist_ok=True, repo_type=repo_type)
        if revision and revision != "main":
            api.create_branch(repo_id, branch=revision, exist_ok=True, repo_type=repo_type)
        ops = [CommitOperationAdd(path_in_repo=f.name, path_or_fileobj=str(f.path)) for f in files]
        # huggingface_hub hashes each file again here: a file rewritten since the gate must not slip through
        for f, op in zip(files, ops):
            if op.upload_info.sha256.hex() != f.sha256:
                raise GateError(f"{f.name}: changed while pushing (sha256 differs from the one just checked)",
                                hint="leave the folder alone while it is pushed; verify it again if it changed "
                                     "(`kconvert verify <folder> --target <target> --report verify.json`), then push")
        ops.append(CommitOperationAdd(path_in_repo=README_NAME, path_or_fileobj=card.encode("utf-8")))
        if on_upload:
            on_upload(0, total)
        info = api.create_commit(repo_id, ops, commit_message=commit_message, commit_description=description,
                                 revision=revision, create_pr=create_pr, repo_type=repo_type)
        if on_upload:
            on_upload(total, total)
    except _hub_errors() as e:
        raise _hub_error(e, repo_id) from None
    except RuntimeError as e:
        # huggingface_hub wraps an LFS upload that failed (after its retries) in RuntimeError("Error while uploading
        # '<file>' to the Hub.") raised from the HTTP or network error
        if not isinstance(e.__cause__, _hub_errors()):
            raise
        raise _hub_error(e, repo_id) from None
    return Commit(str(info.commit_url), info.oid, info.pr_url)


def _hub_errors() -> tuple[type[BaseException], ...]:
    """What a Hub call raises for auth, HTTP and network problems (the HTTP client's own error class included)."""
    # deferred: huggingface_hub is ~35-120 ms of imports; only a Hub id or an upload needs it
    from huggingface_hub.errors import HfHubHTTPError

    return (HfHubHTTPError, OSError, ValueError, *transport_errors())


def _hub_error(e: BaseException, repo_id: str) -> InputError:
    # deferred: huggingface_hub is ~35-120 ms of imports; only a Hub id or an upload needs it
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    first = one_line(e)
    if isinstance(e, RuntimeError) and e.__cause__ is not None:  # a failed LFS upload: say why, hint from the cause
        first = f"{first.rstrip('.')}: {one_line(e.__cause__)}"
        e = e.__cause__
    status = getattr(getattr(e, "response", None), "status_code", None)
    hint = None
    if status in (401, 403) or isinstance(e, RepositoryNotFoundError):
        hint = "set HF_TOKEN to a token with write access to the namespace (or run `hf auth login`)"
    elif not isinstance(e, HfHubHTTPError):
        hint = "is the Hub reachable from here? (HF_ENDPOINT, proxy settings)"
    return InputError(f"push to {repo_id} failed: {first}", hint=hint)


__all__ = ["Commit", "upload"]
