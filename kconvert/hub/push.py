"""`kconvert.hub.push`: gate, render the card, upload everything in one commit."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kconvert.errors import GateError, InputError, UsageError
from kconvert.hub.gate import LocalFile, Progress, bind, check_report, load_report
from kconvert.source.checkpoint import read_provenance


@dataclass
class PushResult:
    repo_id: str
    revision: str | None
    create_pr: bool
    private: bool | None
    dry_run: bool
    commit_message: str
    files: list[LocalFile]
    readme: str
    base_model: str | None
    commit_url: str | None = None
    commit_oid: str | None = None
    pr_url: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files) + len(self.readme.encode("utf-8"))

    @property
    def verdict(self) -> str:
        # push returns only when the gate passed (a refusal raises GateError): committed, or would be (dry run)
        return "pass"

    def to_dict(self) -> dict[str, Any]:
        """The document `kconvert push --json` prints."""
        return {
            "verdict": self.verdict,
            "repo_id": self.repo_id, "revision": self.revision, "create_pr": self.create_pr,
            "private": self.private, "dry_run": self.dry_run, "commit_message": self.commit_message,
            "base_model": self.base_model,
            "operations": [{"op": "add", "path": f.name, "size": f.size, "sha256": f.sha256, "bound": f.bound}
                           for f in self.files]
                          + [{"op": "add", "path": "README.md", "size": len(self.readme.encode("utf-8")),
                              "sha256": None, "bound": False}],
            "total_bytes": self.total_bytes, "readme": self.readme,
            "commit_url": self.commit_url, "commit_oid": self.commit_oid, "pr_url": self.pr_url,
            "notes": list(self.notes),
        }


def _default_message(report: dict[str, Any]) -> str:
    from kconvert._version import __version__
    from kconvert.report.markdown import engine_label

    al = ((report.get("live") or {}).get("acceptance") or {}).get("mean_acceptance_length")
    tail = f", AL {al:.2f}" if isinstance(al, (int, float)) else ""
    return f"Upload EAGLE-3 draft verified by kconvert {__version__} ({engine_label(report)}{tail})"


def _hub_errors() -> tuple[type[BaseException], ...]:
    """What a Hub call raises for auth, HTTP and network problems (the HTTP client's own error class included)."""
    from huggingface_hub.errors import HfHubHTTPError

    from kconvert.source.hub import transport_errors

    return (HfHubHTTPError, OSError, ValueError, *transport_errors())


def _hub_error(e: BaseException, repo_id: str) -> InputError:
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    from kconvert.source.hub import one_line

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


def push(folder: str | Path, repo_id: str, *, report: str | Path | dict[str, Any], revision: str | None = None,
         create_pr: bool = False, private: bool | None = None, dry_run: bool = False,
         commit_message: str | None = None, token: str | None = None, endpoint: str | None = None,
         base_model: str | None = None, tp: int | None = None, progress: Progress | None = None,
         on_upload: Callable[[int, int], None] | None = None) -> PushResult:
    """Publish `folder` to `repo_id` if (and only if) it is the checkpoint a passing verify `report` measured.

    Raises InputError (unreadable/invalid report, Hub errors: auth, network), GateError (verdict not pass, a
    file changed, missing or not covered: the report is of another checkpoint) or UsageError (bad repo id).
    `dry_run` stops after the card is rendered and touches no network. `endpoint`/`token` default to
    huggingface_hub's (HF_ENDPOINT, HF_TOKEN). `base_model` overrides the target id read from the report (needed
    when verify ran against a local target folder); `tp` the tensor-parallel size in the serve lines.
    """
    from kconvert.hub.card import render_card, target_hub_id

    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise UsageError(f"{repo_id!r}: give the repository as org/name")
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as e:
        raise UsageError(f"{repo_id!r}: {str(e).splitlines()[0]}") from None
    doc = load_report(report)
    check_report(doc)
    root = Path(folder).expanduser()
    files = bind(root, doc, progress=progress)
    provenance = read_provenance(root)
    readme_path = root / "README.md"
    existing = readme_path.read_text(encoding="utf-8") if readme_path.is_file() else None
    card = render_card(doc, repo_id, provenance=provenance, existing=existing, target=base_model, tp=tp)
    result = PushResult(repo_id=repo_id, revision=revision, create_pr=create_pr, private=private, dry_run=dry_run,
                        commit_message=commit_message or _default_message(doc), files=files, readme=card,
                        base_model=base_model or target_hub_id(doc))
    if result.base_model is None:
        result.notes.append("no base_model in the card and its serve lines say <target-hub-id>: the report's target "
                            "is a local folder; pass --base-model org/name")
    if dry_run:
        return result

    from huggingface_hub import CommitOperationAdd, HfApi

    api = HfApi(endpoint=endpoint, token=token)
    description = "Files bound to a passing `kconvert verify` report by sha256:\n\n" + "\n".join(
        f"- {f.name}: {f.sha256}" for f in files if f.bound)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True)
        if revision and revision != "main":
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        ops = [CommitOperationAdd(path_in_repo=f.name, path_or_fileobj=str(f.path)) for f in files]
        # huggingface_hub hashes each file again here: a file rewritten since the gate must not slip through
        for f, op in zip(files, ops):
            if op.upload_info.sha256.hex() != f.sha256:
                raise GateError(f"{f.name}: changed while pushing (sha256 differs from the one just checked)")
        ops.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=card.encode("utf-8")))
        if on_upload:
            on_upload(0, result.total_bytes)
        info = api.create_commit(repo_id, ops, commit_message=result.commit_message,
                                 commit_description=description, revision=revision, create_pr=create_pr)
        if on_upload:
            on_upload(result.total_bytes, result.total_bytes)
    except _hub_errors() as e:
        raise _hub_error(e, repo_id) from None
    except RuntimeError as e:
        # huggingface_hub wraps an LFS upload that failed (after its retries) in RuntimeError("Error while uploading
        # '<file>' to the Hub.") raised from the HTTP or network error
        if not isinstance(e.__cause__, _hub_errors()):
            raise
        raise _hub_error(e, repo_id) from None
    result.commit_url = str(info.commit_url)
    result.commit_oid = info.oid
    result.pr_url = info.pr_url
    return result


__all__ = ["PushResult", "push"]
