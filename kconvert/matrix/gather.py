"""Which drafts a matrix covers, and what each one is: local folders and globs, Hub ids `org/name[@rev]`, a file of
them, a Hub search; per draft its revision (Hub commit sha, or the content digest of a local folder), its training
step (from the name) and its target (given, inferred from its own metadata with the evidence, or unknown).

Only small files are read here (config.json, the model card's metadata); the cells read the rest.
"""
from __future__ import annotations

import glob as _glob
import hashlib
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kconvert.errors import InputError, KConvertError, UsageError
from kconvert.source.checkpoint import read_json_file

GLOB_CHARS = re.compile(r"[*?\[]")
# epoch_3, step-12000, checkpoint-500, global_step1200, iter_0004000, ckpt-7: the number after the word
_STEP = re.compile(r"(?:epoch|global_step|step|checkpoint|ckpt|iter|iteration)s?[-_.]?(\d+)", re.IGNORECASE)
HUB_LIMIT = 200


@dataclass
class DraftEntry:
    draft: str  # as given (a path or a Hub id)
    source: str = "local"  # local | hub
    given_target: str | None = None  # a second column of --from FILE, or --target
    revision: str | None = None
    step: int | None = None
    target: dict[str, Any] = field(default_factory=lambda: {"id": None, "state": "unknown", "evidence": []})
    folder: Path | None = None  # where its small files were read (a local folder, a Hub cache snapshot)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"draft": self.draft, "revision": self.revision, "source": self.source, "target": self.target,
                "step": self.step, "error": self.error}


def step_of(ref: str) -> int | None:
    """The training step a checkpoint's name carries (the last such number in its last path parts)."""
    parts = [p for p in ref.replace("\\", "/").rstrip("/").split("/") if p][-2:]
    for part in reversed(parts):
        found = _STEP.findall(part)
        if found:
            return int(found[-1])
    return None


# A list of drafts, one a line: thousands of lines at most.
MAX_LIST_BYTES = 16 * 1024 * 1024


def read_list_file(path: str) -> list[tuple[str, str | None]]:
    """`--from FILE`: one draft per line, optionally followed by its target; `#` starts a comment."""
    from kconvert.guard.paths import read_text

    text = read_text(path, f"--from {path}", max_bytes=MAX_LIST_BYTES)  # the read guard: regular, bounded, UTF-8
    out: list[tuple[str, str | None]] = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        cols = line.split()
        if len(cols) > 2:
            raise UsageError(f"--from {path}:{n}: one draft per line, optionally followed by its target "
                             f"(found {len(cols)} columns)")
        out.append((cols[0], cols[1] if len(cols) == 2 else None))
    return out


def hub_search(*, search: str | None = None, author: str | None = None, limit: int = HUB_LIMIT,
               api: Any = None) -> list[str]:
    """Model ids from `HfApi.list_models` (search text and/or author), most downloaded first."""
    from huggingface_hub import HfApi

    from kconvert.source.hub import one_line

    api = api or HfApi()
    try:
        models = api.list_models(search=search, author=author, sort="downloads", limit=limit)
        return [m.id for m in models]
    except Exception as e:  # the Hub unreachable or refusing: one line, bad input for this run
        what = " ".join(x for x in (f"search {search!r}" if search else "", f"author {author!r}" if author else "")
                        if x)
        raise InputError(f"Hub {what}: could not list models: {one_line(e)}") from None


def expand(refs: list[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
    """Globs expanded here (so that a quoted `runs/*/epoch_*` works as well as the shell's), duplicates dropped."""
    out: list[tuple[str, str | None]] = []
    seen: set[str] = set()
    for ref, target in refs:
        if GLOB_CHARS.search(ref) and not Path(ref).exists():
            matches = sorted(m for m in _glob.glob(os.path.expanduser(ref)) if Path(m).is_dir())
            if not matches:
                raise UsageError(f"{ref}: no folder matches this pattern")
        else:
            matches = [ref]
        for m in matches:
            if m not in seen:
                seen.add(m)
                out.append((m, target))
    return out


def listed_inputs(drafts: list[str], from_file: str | None = None) -> list[str]:
    """The drafts and targets a run reads that its arguments do not spell out: the folders a glob matches, and each
    draft and target a `--from` list names (a Hub search's results are not known before it runs). What the cell
    cache and every report may not be, hold or lie inside: `matrix --from list.txt --csv D/m.csv` with D in the list
    wrote into D."""
    refs: list[tuple[str, str | None]] = [(d, None) for d in drafts]
    if from_file:
        refs += read_list_file(from_file)
    return [x for ref, target in expand(refs) for x in (ref, target) if x]


def order_by_step(entries: list[DraftEntry]) -> list[DraftEntry]:
    """Checkpoints of one run (the same name but for the step number) in step order, at the place of the first;
    every other draft where it was given."""
    def stem(e: DraftEntry) -> str:
        return _STEP.sub(lambda m: m.group(0)[: m.start(1) - m.start(0)] + "#", e.draft) if e.step is not None \
            else e.draft

    first: dict[str, int] = {}
    for i, e in enumerate(entries):
        first.setdefault(stem(e), i)
    return sorted(entries, key=lambda e: (first[stem(e)], e.step if e.step is not None else -1))


# Files up to this size are digested by their content; larger ones (weight shards) by their safetensors header,
# size and modification time unless their content digest is already known, because reading every byte of every
# multi-GB shard on each run would cost more than the static cells it keys (a re-written shard changes its mtime).
CONTENT_DIGEST_MAX = 64 * 1024 * 1024
_HEADER_MAX = 100 * 1024 * 1024


def _file_digest(p: Path) -> str:
    from kconvert.source import hashcache
    from kconvert.source.checkpoint import sha256_file

    known = hashcache.lookup(p)
    if known is not None:
        return known
    st = p.stat()
    if st.st_size <= CONTENT_DIGEST_MAX:
        started = time.time()
        digest = sha256_file(p)
        hashcache.store(p, digest, hashed_at=started)
        return digest
    h = hashlib.sha256(f"size={st.st_size} mtime_ns={st.st_mtime_ns}\0".encode())
    with open(p, "rb") as f:
        head = f.read(8)
        h.update(head)
        if p.suffix == ".safetensors" and len(head) == 8:
            n = int.from_bytes(head, "little")
            if 0 < n <= _HEADER_MAX:
                h.update(f.read(n))
    return "stat+header:" + h.hexdigest()


def local_digest(folder: Path) -> str:
    """`sha256:` over every file's relative path and digest: its content's sha256 (reused from kconvert's stat-keyed
    hash cache), or for a shard larger than 64 MiB not yet hashed, its header, size and mtime."""
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(f"{p.relative_to(folder).as_posix()}\0{_file_digest(p)}\n".encode())
    return "sha256:" + h.hexdigest()


def resolve_hub(ref: str) -> tuple[str, Path]:
    """The commit a Hub id resolves to and the cache snapshot of its small files (as inspect downloads them)."""
    from huggingface_hub import snapshot_download

    from kconvert.source.hub import SMALL_FILE_PATTERNS, hub_errors, split_hub_id

    repo_id, revision = split_hub_id(ref)
    with hub_errors(ref, missing_hint="download it first with `hf download`, or pass a local folder"):
        folder = Path(snapshot_download(repo_id, revision=revision, allow_patterns=SMALL_FILE_PATTERNS))
    return folder.name, folder


# A draft's name that names its target's family (model ids are written many ways: Kimi-K25, kimi-k2.5, K2_5).
_NAME_PROFILES = (
    (re.compile(r"kimi[-_ ]?k2[-_.]?5", re.I), "kimi-k2.5"),
    (re.compile(r"kimi[-_ ]?k2(?![-_.]?\d)", re.I), "kimi-k2"),
    (re.compile(r"llama[-_ ]?3[-_.]?1[-_ ]?(?:instruct[-_ ]?)?8b", re.I), "llama-3.1-8b"),
    (re.compile(r"llama[-_ ]?3[-_.]?3[-_ ]?70b", re.I), "llama-3.3-70b"),
    (re.compile(r"gpt[-_ ]?oss[-_ ]?120b", re.I), "gpt-oss-120b"),
    (re.compile(r"qwen[-_ ]?3[-_ ]?8b", re.I), "qwen3-8b"),
    (re.compile(r"deepseek[-_ ]?v3", re.I), "deepseek-v3"),
)


def _profile_for_hub_id(hub_id: str) -> str | None:
    from kconvert.targets import profile_hub_id, profile_names

    for name in profile_names():
        hid = profile_hub_id(name)
        if hid and hid.lower() == hub_id.split("@", 1)[0].lower():
            return name
    return None


MAX_CARD_BYTES = 16 * 1024 * 1024


def _card_base_model(folder: Path) -> Any:
    card = folder / "README.md"
    if not card.is_file():
        return None
    try:
        import yaml
        from huggingface_hub.repocard import REGEX_YAML_BLOCK

        from kconvert.guard.paths import read_text

        # huggingface_hub's metadata_load, on the text the read guard gave (bounded, a regular file, UTF-8)
        found = REGEX_YAML_BLOCK.search(read_text(card, "README.md", max_bytes=MAX_CARD_BYTES).lstrip("\ufeff"))
        meta = yaml.safe_load(found.group(2)) if found else None
    except Exception:  # a card whose metadata block does not parse says nothing about the target
        return None
    return meta.get("base_model") if isinstance(meta, dict) else None


def infer_target(entry: DraftEntry) -> dict[str, Any]:
    """The draft's target from its own metadata: speculators_config.verifier, the model card's base_model, then a
    name that names a known target. Evidence for each source read; sources that disagree leave it unknown."""
    found: list[tuple[str, str]] = []  # (target id, evidence)
    folder = entry.folder
    if folder is not None and (folder / "config.json").is_file():
        try:  # the one strict, bounded reader of a stranger's config (no RecursionError on deep nesting)
            cfg = read_json_file(folder / "config.json", "config.json")
        except KConvertError:
            cfg = {}
        ver = (cfg.get("speculators_config") or {}).get("verifier") if isinstance(cfg, dict) else None
        name = ver.get("name_or_path") if isinstance(ver, dict) else None
        if isinstance(name, str) and name.strip():
            found.append((name.strip(), f"config.json speculators_config.verifier.name_or_path = {name!r}"))
    if folder is not None:
        base = _card_base_model(folder)
        if isinstance(base, list) and len(base) == 1:
            base = base[0]
        if isinstance(base, str) and base.strip():
            found.append((base.strip(), f"model card base_model = {base!r}"))
    if not found:
        name = entry.draft.split("@", 1)[0]
        for pattern, profile in _NAME_PROFILES:
            m = pattern.search(name)
            if m:
                found.append((profile, f"the name {name!r} names {m.group(0)!r}: profile {profile}"))
                break
    evidence = [ev for _, ev in found]
    if not found:
        return {"id": None, "state": "unknown",
                "evidence": ["no speculators_config.verifier, no model card base_model, no target in the name"]}
    resolved = []
    for tid, _ in found:
        prof = _profile_for_hub_id(tid) if "/" in tid else None
        resolved.append(prof or tid)
    # a path in a verifier field names a folder on the trainer's machine: usable only where it is a folder here
    usable = [r for r in resolved if "/" not in r or re.fullmatch(r"[\w.-]+/[\w.-]+", r) or Path(r).is_dir()]
    if len(set(usable)) > 1:
        return {"id": None, "state": "unknown", "evidence": evidence + [
            f"these disagree ({', '.join(sorted(set(usable)))}): give --target"]}
    if not usable:
        return {"id": None, "state": "unknown", "evidence": evidence + ["not a folder here, a profile or a Hub id: "
                                                                        "give --target"]}
    tid = usable[0]
    if tid != found[0][0]:
        evidence.append(f"{found[0][0]} is the built-in profile {tid}")
    return {"id": tid, "state": "inferred", "evidence": evidence}


# Hub drafts resolved at once: each resolution is a few requests of small answers, waiting on the network. 8 is
# huggingface_hub's own default for the files of one snapshot (`snapshot_download(max_workers=8)`). Each thread's
# snapshot_download fetches its draft's small files (1-3 for a draft: config, index, model card) with its own
# pool, so a few dozen requests at most are in flight, as when `hf download` fetches a repo of small files.
HUB_RESOLVE_THREADS = 8


def _resolve_one(e: DraftEntry) -> None:
    try:
        e.revision, e.folder = resolve_hub(e.draft)
    except KConvertError as err:
        e.error = err.message
    except OSError as err:
        e.error = f"{e.draft}: cannot read: {err.strerror or err}"


def _resolve_hub_entries(entries: list[DraftEntry], threads: int = HUB_RESOLVE_THREADS) -> None:
    """Each Hub draft's commit and small files, up to `threads` drafts at a time; an error stays its draft's."""
    if len(entries) <= 1 or threads <= 1:
        for e in entries:
            _resolve_one(e)
        return
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=min(threads, len(entries)), thread_name_prefix="kconvert-gather")
    try:
        list(pool.map(_resolve_one, entries))  # list(): re-raises what is not a draft's own error (a bug)
    except BaseException:
        # Ctrl-C (or a bug): the drafts not yet started are dropped rather than resolved before it takes effect
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


def gather(drafts: list[str], *, from_file: str | None = None, search: str | None = None,
           author: str | None = None, target: str | None = None, hub_limit: int = HUB_LIMIT,
           api: Any = None) -> list[DraftEntry]:
    """Every draft of the run, in row order, with revision, step and target (errors kept per draft)."""
    refs: list[tuple[str, str | None]] = [(d, None) for d in drafts]
    if from_file:
        refs += read_list_file(from_file)
    if search or author:
        refs += [(m, None) for m in hub_search(search=search, author=author, limit=hub_limit, api=api)]
    refs = expand(refs)
    if not refs:
        raise UsageError("no drafts: give folders, globs or Hub ids, --from FILE, --hub-search or --hub-author")
    from kconvert.formats.detect import locate_draft
    from kconvert.source.hub import is_hub_id

    entries = []
    hub_entries: list[DraftEntry] = []
    for ref, col_target in refs:
        e = DraftEntry(draft=ref, given_target=target or col_target, step=step_of(ref))
        p = Path(ref).expanduser()
        try:
            # os.path, not Path: a name too long for the file system (ENAMETOOLONG) is no folder, no OSError
            if os.path.isdir(p):
                # a producer's checkpoint folder (NeMo Automodel's epoch_E_step_S/) is the draft inside it, named as
                # inspect and fix name it (their next lines); its step stays the one the given name carries
                found = locate_draft(ref)
                if found != ref:
                    e.draft, p = found, Path(found)
                e.folder = p
                e.revision = local_digest(p)
            elif not os.path.exists(p) and is_hub_id(ref) and not ref.startswith((".", "/", "~")):
                e.source = "hub"
                hub_entries.append(e)  # resolved below, several at once
            else:
                e.error = f"{ref}: no such folder" if not os.path.exists(p) else f"{ref}: not a folder"
        except KConvertError as err:
            e.error = err.message
        except OSError as err:
            e.error = f"{ref}: cannot read: {err.strerror or err}"
        entries.append(e)
    _resolve_hub_entries(hub_entries)
    for e in entries:
        if e.given_target:
            e.target = {"id": e.given_target, "state": "given",
                        "evidence": ["--target" if target else "--from FILE's second column"]}
        else:
            e.target = infer_target(e)
    return order_by_step(entries)


__all__ = ["DraftEntry", "gather", "hub_search", "infer_target", "local_digest", "order_by_step",
           "read_list_file", "step_of"]
