"""`kconvert push`: publish a checkpoint only if it is, byte for byte, what a passing verify report measured: the
gate (`hub.binding`), the model card (`hub.card`), one commit (`hub.upload`)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kconvert.commands.inspect import analyse, open_draft
from kconvert.engines.expectations import engine_rules
from kconvert.errors import GateError, UsageError
from kconvert.guard.paths import read_text
from kconvert.hub.binding import LocalFile, Progress, bind, check_report, load_report
from kconvert.hub.card import commit_message as default_commit_message
from kconvert.hub.card import render_card, target_hub_id
from kconvert.hub.upload import upload
from kconvert.source.checkpoint import read_provenance
from kconvert.source.names import README_NAME


MAX_README_BYTES = 16 * 1024 * 1024


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
                          + [{"op": "add", "path": README_NAME, "size": len(self.readme.encode("utf-8")),
                              "sha256": None, "bound": False}],
            "total_bytes": self.total_bytes, "readme": self.readme,
            "commit_url": self.commit_url, "commit_oid": self.commit_oid, "pr_url": self.pr_url,
            "notes": list(self.notes),
        }


def check_repo_id(repo_id: str) -> None:
    """The repository to publish to, checked by the one Hub id check (kconvert.source.hub.hub_id_problem)."""
    from kconvert.source.hub import hub_id_problem

    problem = "a branch goes in --revision" if "@" in repo_id else hub_id_problem(repo_id)
    if problem is not None:
        raise UsageError(f"{repo_id!r}: give the repository as org/name ({problem})")


def refuse_other_method(root: Path, doc: dict[str, Any]) -> None:
    """Refuse a folder that holds another method's checkpoint (K105: DFlash, DSpark, an MTP layer), whatever the
    report says: verify never passes one (it refuses it), so a passing report of it was written otherwise (an older
    kconvert, a hand-edited file), and the card would publish it as an EAGLE-3 draft with EAGLE-3 serve lines.
    Judged on the report's engine row (the newest vLLM row when the report names none kconvert knows)."""
    eng = doc.get("engine") or {}
    try:
        rules = engine_rules(str(eng.get("name") or "vllm"), eng.get("rules_version"))
    except UsageError:
        rules = engine_rules("vllm", None)
    refused = analyse(open_draft(str(root)), None, rules).refusal("push")
    if refused:
        raise GateError(refused["reason"], hint="push publishes EAGLE-3 drafts that passed a live verify; serve "
                                                "this checkpoint with the method named above")


def push(folder: str | Path, repo_id: str, *, report: str | Path | dict[str, Any], revision: str | None = None,
         create_pr: bool = False, private: bool | None = None, dry_run: bool = False,
         commit_message: str | None = None, token: str | None = None, endpoint: str | None = None,
         base_model: str | None = None, tp: int | None = None, progress: Progress | None = None,
         on_upload: Callable[[int, int], None] | None = None) -> PushResult:
    """Publish `folder` to the Hub repository `repo_id` only if it is, byte for byte, the checkpoint a passing
    verify `report` (a path or the dict of `VerifyResult.to_dict()`) measured: one commit with the model card.

    dry_run: check the gate and render the card, no network. base_model: the target's Hub id for the card
    (needed when verify ran against a local folder). endpoint/token: huggingface_hub's defaults otherwise.

    Returns a `PushResult` (`.verdict`, `.to_dict()` = `kconvert push --json`). Raises `GateError` when the
    report does not pass or does not match the files or the folder holds another method's checkpoint (K105), `InputError` for Hub errors, `UsageError` for a bad id.
    """
    check_repo_id(repo_id)
    doc = load_report(report)
    check_report(doc, folder)
    root = Path(folder).expanduser()
    files = bind(root, doc, progress=progress)
    refuse_other_method(root, doc)
    readme_path = root / README_NAME
    # the folder's own card, kept under the new one's metadata: through the read guard like every file kconvert reads
    existing = read_text(readme_path, README_NAME, max_bytes=MAX_README_BYTES) if os.path.lexists(readme_path) \
        else None
    card = render_card(doc, repo_id, provenance=read_provenance(root), existing=existing, target=base_model, tp=tp)
    result = PushResult(repo_id=repo_id, revision=revision, create_pr=create_pr, private=private, dry_run=dry_run,
                        commit_message=commit_message or default_commit_message(doc), files=files, readme=card,
                        base_model=base_model or target_hub_id(doc))
    if result.base_model is None:
        result.notes.append("no base_model in the card and its serve lines say <target-hub-id>: the report's target "
                            "is a local folder; pass --base-model org/name")
    if dry_run:
        return result
    commit = upload(repo_id, files, card, commit_message=result.commit_message, revision=revision,
                    create_pr=create_pr, private=private, token=token, endpoint=endpoint, on_upload=on_upload)
    result.commit_url, result.commit_oid, result.pr_url = commit.url, commit.oid, commit.pr_url
    return result


__all__ = ["PushResult", "push"]
