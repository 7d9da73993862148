"""Hub ids (`org/name[@revision]`) through huggingface_hub: its cache, HF_TOKEN and HF_HUB_OFFLINE.

Only config/index/tokenizer JSON files are downloaded. Tensor headers come from the cache when the
safetensors files are already there (e.g. after a `hf download`), else by HTTP range requests of each file's
first bytes (`HubRangeReader.header`), never the weights. In the latter case the small tensors the rules decode
(d2t, t2d, norms: at most `MAX_SMALL_TENSOR_BYTES` each) are read by HTTP range requests too, so an uncached
draft is checked like a local one. What is read at a resolved commit is kept for the process (`READ_CACHE`): the
engine rows of one draft in a `kconvert matrix` read it once.
"""
from __future__ import annotations

import re
import sys
import threading
from collections import OrderedDict
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from kconvert.errors import HeaderError, InputError, KConvertError
from kconvert.source.checkpoint import (
    MAX_SMALL_TENSOR_BYTES,
    Checkpoint,
    FileEntry,
    Prefetch,
    add_tensors,
    check_placement,
    load_folder,
    load_tensors,
    read_index,
)
from kconvert.source.names import INDEX_NAME, SAFETENSORS_SUFFIX
from kconvert.source.safetensors_header import (
    check_relative_path,
    header_length,
    parse_header_bytes,
    parse_header_json,
)

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}(@[A-Za-z0-9._/-]{1,200})?$")

SMALL_FILE_PATTERNS = ["*.json", "*.md", "*.txt", "*.jinja", "*.model", "*.tiktoken", "*.py"]

# A failing range read is retried a little (429, 5xx, network errors), then inspect stops with one line.
RANGE_RETRIES = 2
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
# The first read of a safetensors file: its 8-byte header length, the file size (Content-Range) and, for all but
# huge headers, the whole header in one request. 100 kB as huggingface_hub's parse_safetensors_file_metadata asks.
FIRST_READ = 100_001
SINGLE_FILE = "model.safetensors"  # what huggingface_hub's get_safetensors_metadata looks for without an index
_COMMIT_SHA = re.compile(r"[0-9a-f]{40}")


NOT_A_HUB_ID = "not of the form org/name[@revision]"


def hub_id_problem(ref: str) -> str | None:
    """Why `ref` is not a Hub id `org/name[@revision]`, or None when it is one: the one check of a repo id, made
    where one is parsed, so that huggingface_hub never raises on it later (its HFValidationError was a kconvert
    bug, exit 70). The shape here (two parts, a revision after `@`); the repo id itself by huggingface_hub's own
    validator (`validate_repo_id`: no leading or trailing '-' or '.', no '--' or '..', no '.git' suffix, at
    most 96 characters a part)."""
    if not _HUB_ID.match(ref) or ".." in ref:
        return NOT_A_HUB_ID
    # deferred: huggingface_hub is ~35-120 ms of imports; only a Hub id needs it (a local draft never does)
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(split_hub_id(ref)[0])
    except HFValidationError as e:
        return str(e)
    return None


def is_hub_id(ref: str) -> bool:
    return hub_id_problem(ref) is None


def split_hub_id(ref: str) -> tuple[str, str | None]:
    repo_id, _, revision = ref.partition("@")
    return repo_id, (revision or None)


def one_line(e: BaseException) -> str:
    """huggingface_hub's HTTP errors span several lines (request id, server message): keep the first, joined
    with the next when it only announces it ("LFS batch API returned errors:")."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()] or [type(e).__name__]
    return f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]


@contextmanager
def hub_errors(label: str, *, missing_hint: str, what: str = "") -> Iterator[None]:
    """huggingface_hub's download errors as one-line InputErrors naming `label` (`org/name`, `--target org/name`)
    and, for a file (`what`, e.g. "config.json "), which one; `missing_hint` says what to do when it is neither
    cached nor reachable. The one mapping for every Hub download kconvert makes (draft and target)."""
    # deferred: huggingface_hub is ~35-120 ms of imports; only a Hub id needs it (a local draft never does)
    from huggingface_hub import constants
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        yield
    except LocalEntryNotFoundError:
        raise InputError(
            f"{label}: {what}not in the Hugging Face cache and the Hub is not reachable"
            + (" (HF_HUB_OFFLINE is set)" if constants.HF_HUB_OFFLINE else ""),
            hint=missing_hint,
        ) from None
    except GatedRepoError:  # a RepositoryNotFoundError too: caught first, or the message would say "no such"
        raise InputError(f"{label}: gated repository; accept its terms and set HF_TOKEN") from None
    except RepositoryNotFoundError:
        raise InputError(f"{label}: no such repository on the Hub (or it is private: set HF_TOKEN)") from None
    except RevisionNotFoundError:
        raise InputError(f"{label}: no such revision") from None
    except HFValidationError as e:  # an argument huggingface_hub refuses (a revision, a file name): bad input
        raise InputError(f"{label}: {one_line(e)}") from None
    except (HfHubHTTPError, OSError) as e:
        raise InputError(f"{label}: the Hub could not be reached: {one_line(e)}") from None


# Endpoint -> whether it answered one HEAD, asked once per process (hub_reachable).
_REACHABLE: dict[str, bool] = {}


def hub_reachable() -> bool:
    """Whether the Hub's endpoint answers at all: one HEAD without retries, asked once per process and endpoint
    (False at once under HF_HUB_OFFLINE).

    huggingface_hub's `hf_hub_download`, when no cached copy exists and the metadata request fails with a network
    error, asks again through `http_backoff` (file_download.py: "No local file found. Retrying..", up to 5 retries
    waiting 1, 2, 4, 8, 8 s with `_ETAG_RETRY_TIMEOUT` 60 s), so an offline `--target org/name` took 25-40 s to
    say the Hub is not reachable (issue #49). `snapshot_download` falls back to the cache at the first error and
    needs no probe. Any HTTP answer, whatever its status, counts as reachable."""
    from huggingface_hub import constants  # deferred: huggingface_hub, only on the Hub's paths
    from huggingface_hub.utils import get_session

    if constants.HF_HUB_OFFLINE:
        return False
    endpoint = constants.ENDPOINT
    if endpoint not in _REACHABLE:
        try:
            get_session().head(endpoint, timeout=constants.HF_HUB_ETAG_TIMEOUT)
            _REACHABLE[endpoint] = True
        except (OSError, *transport_errors()):  # requests' errors are OSErrors; httpx's are its HTTPError
            _REACHABLE[endpoint] = False
    return _REACHABLE[endpoint]


def hub_file(repo_id: str, filename: str, *, revision: str | None = None) -> str:
    """One file of a Hub repository through huggingface_hub's cache: downloaded when the Hub answers, else the
    cached copy at once (LocalEntryNotFoundError when there is none; `hub_errors` turns it into one line). The one
    single-file download kconvert makes (a target's config.json, an engine's draft config)."""
    from huggingface_hub import hf_hub_download  # deferred: huggingface_hub, only on the Hub's paths

    return hf_hub_download(repo_id, filename, revision=revision, local_files_only=not hub_reachable())


def load_hub(ref: str, *, prefetch: Prefetch | None = None) -> Checkpoint:
    # huggingface_hub is imported where a Hub id is used: a local draft never needs it
    from huggingface_hub import constants, snapshot_download

    repo_id, revision = split_hub_id(ref)
    offline = bool(constants.HF_HUB_OFFLINE)
    with hub_errors(ref, missing_hint="download it first with `hf download`, or pass a local folder"):
        folder = Path(snapshot_download(repo_id, revision=revision, allow_patterns=SMALL_FILE_PATTERNS))

    # folder = <cache>/models--org--name/snapshots/<commit>; its files link into ../../blobs.
    repo_cache = folder.parent.parent
    ckpt = load_folder(folder, ref=ref, kind="hub", allowed_root=repo_cache, read_tensors=False)
    ckpt.repo_id, ckpt.revision, ckpt.commit = repo_id, revision, folder.name
    index = _cached_index(ckpt, folder)
    if _weights_cached(ckpt, folder, index):
        load_tensors(ckpt, folder)
        return ckpt
    if offline:
        ckpt.notes.append("no safetensors file of this repository is in the cache; tensor checks are skipped")
        return ckpt
    _load_remote_tensors(ckpt, ref, folder, repo_cache, index, prefetch)
    return ckpt


def _cached_index(ckpt: Checkpoint, folder: Path) -> dict[str, str] | None:
    """The index downloaded with the small files, validated (caps, strict JSON, shard paths) before any use."""
    return read_index(ckpt, folder) if INDEX_NAME in ckpt.files else None


def _weights_cached(ckpt: Checkpoint, folder: Path, index: dict[str, str] | None) -> bool:
    """Read the headers from the cache when the files they live in are all there (every shard of the index)."""
    if index is not None:
        return all((folder / shard).exists() for shard in set(index.values()))
    return any(f.endswith(SAFETENSORS_SUFFIX) for f in ckpt.files)


def _load_remote_tensors(ckpt: Checkpoint, ref: str, folder: Path, repo_cache: Path,
                         index: dict[str, str] | None, prefetch: Prefetch | None) -> None:
    assert ckpt.repo_id is not None and ckpt.commit is not None
    reader = HubRangeReader.create(ref, ckpt.repo_id, ckpt.commit)
    if reader is None:
        _load_remote_headers_only(ckpt, ref, folder, repo_cache, index)
        return
    # The files get_safetensors_metadata reads: the index's shards, else model.safetensors. Read here by our own
    # range reads rather than through it: its first read (bytes 0-100000) holds the header length and the file
    # size, which it throws away (one more request per file to learn them), it keeps whatever body comes back
    # (a server ignoring Range would have it hold a whole shard in memory), and a HEAD precedes every file.
    # Where both exist the index is used, as for a local folder (`load_folder`).
    placed: dict[str, str] = {}
    for fname in sorted(set(index.values())) if index is not None else [SINGLE_FILE]:
        # Names come from the repository's index: the same path rules as for a local folder.
        check_relative_path(folder, fname, fname, allowed_root=repo_cache)
        got = reader.header(fname, missing_ok=index is None)
        if got is None:  # huggingface_hub's NotASafetensorsRepoError, in its words
            raise InputError(f"{ref}: NotASafetensorsRepoError: '{ckpt.repo_id}' is not a safetensors repo. "
                             f"Couldn't find '{INDEX_NAME}' or '{SINGLE_FILE}' files.")
        raw, size = got
        h = parse_header_bytes(fname, raw, file_size=size)
        add_tensors(ckpt, fname, h.tensors, placed, sharded=index is not None)
        ckpt.shard_metadata[fname] = dict(h.metadata)
        ckpt.files[fname] = FileEntry(fname, size)
    if index is not None:
        check_placement(index, placed)  # as load_tensors checks a local sharded checkpoint
        ckpt.index = dict(index)

    # A small tensor read when a rule first uses it goes through `Context.array`, which treats a read error as "not
    # readable here" and skips the check: a failing or lying server would then silently skip the check of d2t, the
    # very defect this path exists to catch. Read up front, a bad answer stops here with one line instead.
    for name in prefetch(sorted(ckpt.tensors)) if prefetch else ():
        info = ckpt.tensors[name]
        if 0 < info.nbytes <= MAX_SMALL_TENSOR_BYTES:
            reader.prefetch(info.file, info.start, info.end)
    ckpt.remote_reader = reader
    ckpt.notes.append("tensor headers read from the Hub; small tensors (d2t, t2d, norms) are read by HTTP range "
                      "requests, the weights were not downloaded")


def _load_remote_headers_only(ckpt: Checkpoint, ref: str, folder: Path, repo_cache: Path,
                              index: dict[str, str] | None) -> None:
    """An older, requests-based huggingface_hub (no streamed HTTP helper): the headers through its
    safetensors-metadata API, offsets relative to the data section, no small tensors."""
    # deferred: huggingface_hub is ~35-120 ms of imports; only a Hub id needs it (a local draft never does)
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    assert ckpt.repo_id is not None and ckpt.commit is not None
    try:
        meta = HfApi().get_safetensors_metadata(ckpt.repo_id, revision=ckpt.commit)
    except (HfHubHTTPError, OSError) as e:
        raise InputError(f"{ref}: could not read safetensors headers from the Hub: {one_line(e)}") from None
    except Exception as e:  # NotASafetensorsRepoError / SafetensorsParsingError live in errors too
        raise InputError(f"{ref}: {type(e).__name__}: {one_line(e)}") from None
    placed: dict[str, str] = {}
    for fname, fmeta in sorted(meta.files_metadata.items()):
        check_relative_path(folder, fname, fname, allowed_root=repo_cache)
        header = {name: {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": list(t.data_offsets)}
                  for name, t in fmeta.tensors.items()}
        h = parse_header_json(fname, header, data_start=0, file_size=None)
        add_tensors(ckpt, fname, h.tensors, placed, sharded=index is not None)
        ckpt.shard_metadata[fname] = dict(fmeta.metadata or {})
        ckpt.files[fname] = FileEntry(fname, None)
    if meta.sharded and index is not None:
        check_placement(index, placed)
        ckpt.index = dict(index)
    ckpt.notes.append("tensor headers read from the Hub; small tensors (d2t, t2d, norms) were not downloaded "
                      "(this huggingface_hub has no streamed HTTP helper for range reads; upgrade it)")


class ReadCache:
    """Bytes read by range from the Hub at a resolved commit, kept for the process: (file URL, start, end) ->
    (bytes, file size). The URL names the endpoint, the repository, the commit sha and the file; only a 40-hex
    commit is ever a key (a branch or tag names different bytes once it moves), so what is kept never goes stale.

    Bounded by `budget` bytes, least recently used first out; an answer larger than a quarter of the budget is
    not kept (it would push out everything else). 64 MiB: a matrix runs a draft's engine rows one after another,
    so the working set is the draft being read, ~0.5 MB for a Kimi-K2.5-shaped draft (the 100 kB first read of
    each shard, d2t 256 kB, t2d 160 kB, the norms); 64 MiB keeps a hundred such drafts, which covers a pool
    worker's recent drafts in any order the executor hands them out, and stays small beside a worker's imports.
    Thread-safe (inspect itself reads from one thread; a library caller may use several)."""

    def __init__(self, budget: int = 64 * 1024 * 1024):
        self.budget = budget
        self.size = 0
        self.hits = self.misses = 0
        self._items: OrderedDict[tuple[str, int, int], tuple[bytes, int | None]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, int, int]) -> tuple[bytes, int | None] | None:
        with self._lock:
            got = self._items.get(key)
            if got is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return got

    def put(self, key: tuple[str, int, int], value: tuple[bytes, int | None]) -> None:
        n = len(value[0])
        if n > self.budget // 4:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.size -= len(old[0])
            self._items[key] = value
            self.size += n
            while self.size > self.budget:
                _, dropped = self._items.popitem(last=False)
                self.size -= len(dropped[0])

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.size = self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._items)


READ_CACHE = ReadCache()


def transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP client library's own errors (timeouts, refused connections, protocol errors), taken from the
    client huggingface_hub uses (httpx2 in 2.x, httpx in 1.x) rather than imported by name."""
    from huggingface_hub.utils import get_session  # deferred: huggingface_hub, only on the Hub's paths

    lib = sys.modules.get(type(get_session()).__module__.partition(".")[0])
    err = getattr(lib, "HTTPError", None)
    return (err,) if isinstance(err, type) and issubclass(err, BaseException) else ()


class HubRangeReader:
    """`Checkpoint.remote_reader` for a Hub repository at one commit: `reader(file, start, end)` returns exactly
    bytes [start, end) of the file (absolute offsets, as in `TensorInfo`).

    Each read is one GET of `hf_hub_url(repo, file, revision=commit)` with a `Range: bytes=a-b` header, through
    huggingface_hub's own HTTP stack: `hf_hub_url` honours HF_ENDPOINT, `build_hf_headers` HF_TOKEN and the user
    agent, `http_stream_backoff` uses the shared `get_session()` client (proxies, `set_client_factory`,
    HF_HUB_DOWNLOAD_TIMEOUT, offline mode) and retries 429/5xx and network errors. The Hub answers `resolve/` of an
    LFS/Xet file with a redirect to its storage, which serves ranges; the client follows it and drops the
    Authorization header on the other origin.

    Not `HfFileSystem`: its files read ahead in blocks (more than asked is fetched) and its `_fetch_range` keeps
    whatever body comes back (`r.content`), so a server that ignores Range would make it hold a whole multi-GB
    shard in memory. Here the body is streamed, checked (206 with the asked Content-Range, or 200 only when the
    whole file is exactly the asked bytes) and reading stops one byte past the asked length.
    """

    def __init__(self, ref: str, repo_id: str, commit: str, stream: Any):
        self.ref, self.repo_id, self.commit = ref, repo_id, commit
        self._stream = stream
        self._errors = transport_errors()
        self.sizes: dict[str, int | None] = {}  # files whose header length is known -> size, when known
        self._cache: dict[tuple[str, int, int], bytes] = {}

    @classmethod
    def create(cls, ref: str, repo_id: str, commit: str) -> HubRangeReader | None:
        try:  # deferred: huggingface_hub, only on the Hub's paths
            from huggingface_hub.utils import http_stream_backoff
        except ImportError:  # an older, requests-based huggingface_hub: keep the headers-only behaviour
            return None
        return cls(ref, repo_id, commit, http_stream_backoff)

    def header(self, file: str, *, missing_ok: bool = False) -> tuple[bytes, int | None] | None:
        """The header JSON bytes of `file` and its size when known, from the first `FIRST_READ` bytes (one request
        that holds the 8-byte header length too) and, only when the header is longer, one more range read of the
        rest. None when `missing_ok` and the file is not in the repository."""
        got = self._get(file, 0, FIRST_READ, to_end=True, missing_ok=missing_ok, what="safetensors headers")
        if got is None:
            return None
        first, size = got
        if len(first) < 8:
            raise HeaderError(file, f"file is {len(first)} bytes, too short for a safetensors header")
        n = header_length(file, first[:8], size)
        if 8 + n <= len(first):
            raw = first[8:8 + n]
        else:
            raw = self._get(file, 8, 8 + n, what="safetensors headers")[0]  # type: ignore[index]
        self.sizes[file] = size
        return raw, size

    def prefetch(self, file: str, start: int, end: int) -> None:
        self._cache[(file, start, end)] = self(file, start, end)

    def __call__(self, file: str, start: int, end: int) -> bytes:
        cached = self._cache.get((file, start, end))
        if cached is not None:
            return cached
        if file not in self.sizes:
            raise HeaderError(file, "not a safetensors file of this checkpoint")
        size = self.sizes[file]
        if not 0 <= start <= end or (size is not None and end > size):
            raise HeaderError(file, f"byte range {start}-{end} lies outside the file ({size} bytes)")
        if end - start > MAX_SMALL_TENSOR_BYTES:
            raise InputError(f"{file}: {end - start} bytes is more than inspect reads")
        if end == start:
            return b""
        return self._get(file, start, end)[0]  # type: ignore[index]

    def _get(self, file: str, start: int, end: int, *, to_end: bool = False, missing_ok: bool = False,
             what: str = "") -> tuple[bytes, int | None] | None:
        """GET bytes [start, end) of `file`; returns them and the file's size when the answer tells it. `to_end`:
        a file that ends before `end` answers with the bytes up to its end. Answers at a commit sha come from
        and go to `READ_CACHE`."""
        # deferred: huggingface_hub is ~35-120 ms of imports; only a Hub id needs it (a local draft never does)
        from huggingface_hub import hf_hub_url

        url = hf_hub_url(self.repo_id, file, revision=self.commit)
        key = (url, start, end)
        pinned = bool(_COMMIT_SHA.fullmatch(self.commit))
        if pinned:
            hit = READ_CACHE.get(key)
            if hit is not None:
                return hit
        got = self._fetch(url, file, start, end, to_end=to_end, missing_ok=missing_ok, what=what)
        if got is not None and pinned:
            READ_CACHE.put(key, got)
        return got

    def _fetch(self, url: str, file: str, start: int, end: int, *, to_end: bool, missing_ok: bool,
               what: str) -> tuple[bytes, int | None] | None:
        from huggingface_hub import constants
        from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError
        from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

        want = end - start
        span = f"bytes {start}-{end - 1}"
        # identity: a compressed body would make Content-Length/Content-Range describe other bytes than these.
        headers = {**build_hf_headers(), "Range": f"bytes={start}-{end - 1}", "Accept-Encoding": "identity"}
        data = bytearray()
        try:
            with self._stream("GET", url, headers=headers, timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT,
                              max_retries=RANGE_RETRIES, base_wait_time=0.5, max_wait_time=4) as r:
                hf_raise_for_status(r)
                want, size = self._check_answer(file, span, start, want, r, to_end=to_end)
                for chunk in r.iter_bytes():
                    data += chunk
                    if len(data) > want:
                        break  # never read on past the asked bytes: leaving the block closes the connection
        except KConvertError:
            raise
        except EntryNotFoundError:
            if missing_ok:
                return None
            raise InputError(f"{self.ref}: {file} is not in the repository at {self.commit}") from None
        except (HfHubHTTPError, OSError, *self._errors) as e:
            lead = f"could not read {what} from the Hub: {file} ({span})" if what else \
                f"reading {file} ({span}) from the Hub failed"
            raise InputError(f"{self.ref}: {lead}: {one_line(e)}") from None
        if len(data) != want:
            got = f"more than {want}" if len(data) > want else str(len(data))
            raise HeaderError(file, f"the Hub sent {got} bytes for {span} ({want} asked)")
        return bytes(data), size

    @staticmethod
    def _check_answer(file: str, span: str, start: int, want: int, r: Any, *,
                      to_end: bool = False) -> tuple[int, int | None]:
        """Status and headers of a range answer, checked before reading its body; returns the number of bytes the
        body must hold (`want`, or with `to_end` fewer when the file ends first) and the file size when known."""
        if r.status_code == 206:
            cr = r.headers.get("Content-Range") or ""
            m = _CONTENT_RANGE.fullmatch(cr.strip())
            total = None if m is None or m[3] == "*" else int(m[3])
            if m is not None and (int(m[1]), int(m[2])) == (start, start + want - 1):
                return want, total
            # a file shorter than the asked span: the storage answers its bytes up to the end, and says so
            if (to_end and m is not None and total is not None and int(m[1]) == start
                    and start <= int(m[2]) == total - 1 < start + want - 1):
                return total - start, total
            raise HeaderError(file, f"the Hub answered {span} with Content-Range {cr!r}")
        if r.status_code == 200:
            # The server ignored Range and sends the whole file: usable only if the whole file is the asked bytes
            # (or, with `to_end`, no more than them).
            length = r.headers.get("Content-Length")
            n = int(length) if length is not None and length.isdigit() else None
            if start != 0 or n is None or not (n == want or (to_end and n < want)):
                raise HeaderError(file, f"the Hub ignored the range request for {span} (status 200 with "
                                        f"{length or 'an unknown number of'} bytes); the whole file is not read")
            return n, n
        raise HeaderError(file, f"the Hub answered {span} with status {r.status_code}")
