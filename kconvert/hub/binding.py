"""The binding of a verify report to a folder: publish only a folder whose weights and config are, byte for byte,
what a passing verify report measured.

The binding is by sha256 of every weight and config file (`*.safetensors`, `model.safetensors.index.json`,
`config.json`, plus tokenizer files when the report lists them). Other files (`kconvert.json`, a README) travel
along unbound: they do not change what the engine loads.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kconvert.errors import GateError, InputError
from kconvert.guard.paths import read_json
from kconvert.schemas import validate
from kconvert.source.checkpoint import list_files, sha256_file
from kconvert.source.names import CONFIG_NAME, INDEX_NAME, README_NAME, SAFETENSORS_SUFFIX, TOKENIZER_FILES, is_pickle

Progress = Callable[[int, int, str], None]


def is_weight_or_config(name: str) -> bool:
    return name.endswith(SAFETENSORS_SUFFIX) or name in (INDEX_NAME, CONFIG_NAME)


@dataclass
class LocalFile:
    name: str
    path: Path
    size: int
    sha256: str | None = None
    bound: bool = False  # checked against the report

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "sha256": self.sha256, "bound": self.bound}


# A verify report is tens of KB (a few MB with every prompt's outputs).
MAX_REPORT_BYTES = 64 * 1024 * 1024


def load_report(report: str | Path | dict[str, Any]) -> dict[str, Any]:
    """A verify report from a path or a dict, validated against schemas/report.schema.json (InputError)."""
    if isinstance(report, dict):
        doc, what = report, "report"
    else:
        p = Path(report).expanduser()
        what = f"--report {report}"
        # the read guard: a regular file (a FIFO or device is refused unopened), bounded, strict JSON nested at
        # most 64 levels (checked before parsing)
        doc = read_json(p, what, max_bytes=MAX_REPORT_BYTES, noun="report",
                        missing_hint="run `kconvert verify ... --json > verify.json` first")
    if not isinstance(doc, dict):
        raise InputError(f"{what}: not a JSON object")
    validate(doc, "report", what=what)
    return doc


def verify_live(doc: dict[str, Any], folder: str | Path | None = None) -> str:
    """The command that writes a report push takes: a live verify of the folder to push (it hashes every local file
    it measured), against the report's target. Each refusal below hints it, so the way on is always printed."""
    source = folder if folder is not None else (doc.get("subject") or {}).get("source") or "<dir>"
    target = (doc.get("target") or {}).get("name") or "<target>"
    return shlex.join(["kconvert", "verify", str(source), "--target", str(target), "--report", "verify.json"])


def check_report(doc: dict[str, Any], folder: str | Path | None = None) -> None:
    """Refuse a report that does not say "this draft passed live verification"."""
    again = verify_live(doc, folder)
    if doc.get("command") != "verify":
        raise GateError(f"the report is from `kconvert {doc.get('command')}`, not `kconvert verify`; push needs a "
                        "verify report", hint=f"write one: `{again}`")
    if doc.get("verdict") != "pass":
        raise GateError(f"the report's verdict is {doc.get('verdict')!r}, not 'pass'; push publishes only a draft "
                        "that passed verification",
                        hint=f"its findings and gate checks say why; after repairing it, verify again: `{again}`")
    if not doc.get("live"):
        dry = " (a dry run starts no engine)" if doc.get("dry_run") else ""
        raise GateError(f"the report has no live results{dry}; push publishes only a draft verified live",
                        hint=f"verify it live (the `live` extra, or `gpu` on GPUs): `{again}`")


def list_folder(folder: Path) -> dict[str, LocalFile]:
    if not folder.is_dir():
        raise InputError(f"{folder}: no such folder" if not folder.exists() else f"{folder}: not a folder")
    return {rel: LocalFile(rel, folder / rel, e.size) for rel, e in list_files(folder).items()}


def bind(folder: Path, doc: dict[str, Any], *, progress: Progress | None = None) -> list[LocalFile]:
    """Every file to upload, hashed; GateError naming the first file that differs from the report.

    README.md is left out (the card is rendered from it); pickle weights are refused.
    """
    local = list_folder(folder)
    local.pop(README_NAME, None)
    # Weights kconvert never verifies nor publishes: an engine could load them instead of the safetensors.
    pickles = sorted(n for n in local if is_pickle(n))
    if pickles:
        raise GateError(f"{pickles[0]}: pickle weights are not covered by a verify report and are never pushed",
                        hint="remove them from the folder (`kconvert fix` never writes them)")
    subject = doc.get("subject") or {}
    reported = {f["name"]: f for f in subject.get("files") or []}
    rep_bound = {n for n in reported if is_weight_or_config(n) or n in TOKENIZER_FILES}
    loc_bound = {n for n in local if is_weight_or_config(n)} | (rep_bound & set(local))
    source = subject.get("source") or "?"
    again = f"verify this folder and push with that report: `{verify_live(doc, folder)}`"
    missing = sorted(rep_bound - set(local))
    if missing:
        raise GateError(f"{missing[0]}: in the report but missing from {folder}"
                        + (" (the report is of another checkpoint?)" if not (rep_bound & set(local)) else ""),
                        hint=again)
    extra = sorted(loc_bound - rep_bound)
    if extra:
        raise GateError(f"{extra[0]}: in {folder} but not in the report: the report is of another checkpoint "
                        f"(its subject: {source})", hint=again)
    for n in sorted(loc_bound):
        local[n].bound = True
        want = reported[n]
        if not want.get("sha256"):
            raise GateError(f"{n}: the report records no sha256 for it, so nothing binds it to the report",
                            hint="verify the folder you push, not a Hub id (a live verify hashes every local file "
                                 f"it measured): `{verify_live(doc, folder)}`")
        if want.get("size") is not None and want["size"] != local[n].size:
            raise GateError(f"{n}: {local[n].size} bytes in {folder}, {want['size']} in the report (changed after "
                            "verify, or the report is of another checkpoint)", hint=again)
    total = sum(f.size for f in local.values())
    done = 0
    mismatches: list[str] = []
    for n in sorted(local, key=lambda x: (not local[x].bound, x)):
        f = local[n]
        if progress:
            progress(done, total, f"hashing {n}")
        f.sha256 = sha256_file(f.path)
        done += f.size
        if f.bound and f.sha256 != reported[n]["sha256"]:
            mismatches.append(n)
    if progress:
        progress(total, total, "hashed")
    if mismatches:
        n = mismatches[0]
        other = len(mismatches) == len(loc_bound)
        raise GateError(f"{n}: sha256 {local[n].sha256[:12]}… in {folder}, {reported[n]['sha256'][:12]}… in the "
                        "report " + (f"(no file matches: the report is of another checkpoint, {source})" if other
                                     else "(the file changed after verify)"), hint=again)
    return [local[n] for n in sorted(local)]


__all__ = ["LocalFile", "bind", "check_report", "is_weight_or_config", "list_folder", "load_report", "verify_live"]
