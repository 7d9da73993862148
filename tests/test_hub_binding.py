"""hub/binding.py's `bind` and `list_folder` called directly on small folders written here, against a verify
report's `subject.files` written by hand: every expected sha256 is hashlib's digest of the bytes the test wrote,
every size their length, every order sorted by hand. load_report/check_report's refusals are the full lines a
user reads, their OS part strerror(ENOTDIR) ("Not a directory", POSIX open(2)), their schema part jsonschema's
`required` message. No engine, no network; milliseconds (bench/NOTES.md, "Mutation score per module":
hub/binding.py's survivors)."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from kconvert.errors import GateError, InputError
from kconvert.hub.binding import bind, check_report, list_folder, load_report

WEIGHTS = b"\x08\x00\x00\x00\x00\x00\x00\x00{}      "  # the bytes do not matter to bind: it hashes, never parses
CONFIG = b'{"architectures": ["LlamaForCausalLMEagle3"]}'
TOKENIZER = b'{"version": "1.0"}'


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def folder_and_report(tmp_path: Path, extra: dict[str, bytes] | None = None, listed: dict[str, bytes] | None = None):
    """A draft folder (weights, config, plus `extra`) and the report's files list (the weights and config, plus
    `listed`), each entry {name, size, sha256} as verify records it (schemas/report.schema.json subject.files)."""
    d = tmp_path / "draft"
    d.mkdir()
    files = {"model.safetensors": WEIGHTS, "config.json": CONFIG, **(extra or {})}
    for n, b in files.items():
        (d / n).write_bytes(b)
    rep = {"model.safetensors": WEIGHTS, "config.json": CONFIG, **(listed or {})}
    doc = {"subject": {"source": "acme/draft", "files": [{"name": n, "size": len(b), "sha256": sha(b)}
                                                          for n, b in rep.items()]}}
    return d, doc


def test_list_folder_refuses_a_missing_path_and_a_file_naming_each(tmp_path):
    """A path that does not exist and a path that is a file are two different mistakes (ENOENT vs ENOTDIR in
    open(2)'s terms): each refusal names the path and which it is."""
    with pytest.raises(InputError) as e:
        list_folder(tmp_path / "nope")
    assert e.value.message == f"{tmp_path / 'nope'}: no such folder"
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError) as e:
        list_folder(tmp_path / "f")
    assert e.value.message == f"{tmp_path / 'f'}: not a folder"


def test_bind_returns_every_file_but_the_readme_hashed_and_the_bound_ones_marked(tmp_path):
    """bind's docstring: README.md is left out (the card is rendered from it); kconvert.json travels unbound (the
    module docstring); a tokenizer file the report lists is bound, one it does not list travels unbound. The
    sha256 of each is hashlib's of the bytes written, the size their length; the list is sorted by name."""
    d, doc = folder_and_report(tmp_path, extra={"README.md": b"# card", "kconvert.json": b"{}",
                                                "tokenizer.json": TOKENIZER, "vocab.json": b"{}"},
                               listed={"tokenizer.json": TOKENIZER})
    out = bind(d, doc)
    assert [f.to_dict() for f in out] == [
        {"name": "config.json", "size": len(CONFIG), "sha256": sha(CONFIG), "bound": True},
        {"name": "kconvert.json", "size": 2, "sha256": sha(b"{}"), "bound": False},
        {"name": "model.safetensors", "size": len(WEIGHTS), "sha256": sha(WEIGHTS), "bound": True},
        {"name": "tokenizer.json", "size": len(TOKENIZER), "sha256": sha(TOKENIZER), "bound": True},
        {"name": "vocab.json", "size": 2, "sha256": sha(b"{}"), "bound": False},
    ]


def test_bind_reports_progress_bound_files_first_then_the_rest_in_name_order(tmp_path):
    """The progress callback gets (bytes done, bytes in all, what): the bound files hashed first (sorted), then
    the unbound ones, then (total, total, "hashed"); the byte counts are the sums of the lengths written here."""
    d, doc = folder_and_report(tmp_path, extra={"a-notes.txt": b"12345", "kconvert.json": b"{}"})
    calls = []
    bind(d, doc, progress=lambda done, total, what: calls.append((done, total, what)))
    total = len(WEIGHTS) + len(CONFIG) + 5 + 2
    assert calls == [(0, total, "hashing config.json"),
                     (len(CONFIG), total, "hashing model.safetensors"),
                     (len(CONFIG) + len(WEIGHTS), total, "hashing a-notes.txt"),
                     (len(CONFIG) + len(WEIGHTS) + 5, total, "hashing kconvert.json"),
                     (total, total, "hashed")]


def test_pickle_weights_are_refused_first_in_name_order_with_the_remedy(tmp_path):
    """pytorch_model.bin (torch.save's zip, whose data.pkl is a pickle: kconvert/source/names.py PICKLE_SUFFIXES)
    is never pushed; the first such name in sorted order is named, and the hint says to remove them."""
    d, doc = folder_and_report(tmp_path, extra={"z.pkl": b"x", "pytorch_model.bin": b"x"})
    with pytest.raises(GateError) as e:
        bind(d, doc)
    assert e.value.message.startswith("pytorch_model.bin: pickle weights")
    assert e.value.hint and e.value.hint.startswith("remove them from the folder")


def test_a_reported_file_missing_from_the_folder_names_it_and_says_when_nothing_matches(tmp_path):
    """A weight the report lists but the folder lacks: named (first in sorted order). When none of the report's
    bound files is in the folder, the report is of another checkpoint, and the refusal says so."""
    d, doc = folder_and_report(tmp_path, listed={"model-00002.safetensors": b"x", "model-00001.safetensors": b"y"})
    with pytest.raises(GateError) as e:
        bind(d, doc)
    assert e.value.message == f"model-00001.safetensors: in the report but missing from {d}"
    other = {"subject": {"files": [{"name": "w.safetensors", "size": 1, "sha256": sha(b"w")}]}}
    (d / "model.safetensors").unlink()
    (d / "config.json").unlink()
    (d / "x.txt").write_text("x")
    with pytest.raises(GateError) as e:
        bind(d, other)
    assert e.value.message == f"w.safetensors: in the report but missing from {d} (the report is of another checkpoint?)"


def test_a_size_that_differs_from_the_report_names_both_sizes(tmp_path):
    """The report's size is compared before hashing: both byte counts (len of what was written, the report's)."""
    d, doc = folder_and_report(tmp_path)
    doc["subject"]["files"][0]["size"] = len(WEIGHTS) + 1
    with pytest.raises(GateError) as e:
        bind(d, doc)
    assert e.value.message.startswith(f"model.safetensors: {len(WEIGHTS)} bytes in {d}, {len(WEIGHTS) + 1} in the "
                                      "report")


def test_a_sha256_mismatch_names_the_file_and_tells_changed_from_another_checkpoint(tmp_path):
    """One bound file changed after verify (of two): "the file changed after verify"; every bound file differs:
    "another checkpoint" with the report's source. The 12-hex prefixes are hashlib's digests' first 12."""
    d, doc = folder_and_report(tmp_path)
    (d / "config.json").write_bytes(CONFIG.replace(b"]", b" ]"))  # different bytes, different length
    doc["subject"]["files"][1]["size"] = None
    with pytest.raises(GateError) as e:
        bind(d, doc)
    got = sha(CONFIG.replace(b"]", b" ]"))
    assert e.value.message == (f"config.json: sha256 {got[:12]}… in {d}, {sha(CONFIG)[:12]}… in the report "
                               "(the file changed after verify)")
    for f in doc["subject"]["files"]:
        f["sha256"] = sha(b"something else " + f["name"].encode())
    with pytest.raises(GateError) as e:
        bind(d, doc)
    assert e.value.message.endswith("(no file matches: the report is of another checkpoint, acme/draft)")


def test_a_weight_in_the_folder_but_not_in_the_report_and_a_report_without_sha256_are_refused(tmp_path):
    """A second shard the report never measured: named, with the report's subject (its `source`). A bound file the
    report lists without a sha256: nothing binds it, so refused with the remedy (hashing on)."""
    d, doc = folder_and_report(tmp_path, extra={"model-extra.safetensors": b"x"})
    with pytest.raises(GateError) as e:
        bind(d, doc)
    assert e.value.message == (f"model-extra.safetensors: in {d} but not in the report: the report is of another "
                               "checkpoint (its subject: acme/draft)")
    (d / "model-extra.safetensors").unlink()
    doc["subject"]["files"][1]["sha256"] = None
    with pytest.raises(GateError) as e:
        bind(d, doc)
    assert e.value.message.startswith("config.json: the report records no sha256")
    # the remedy is a command that runs (issue #48: "rerun verify with hashing on" named no option): a live verify of
    # the folder itself, which hashes every local file it measured
    assert e.value.hint == ("verify the folder you push, not a Hub id (a live verify hashes every local file it "
                            f"measured): `kconvert verify {d} --target '<target>' --report verify.json`")


def test_a_size_mismatch_says_the_file_changed_or_the_report_is_of_another_checkpoint(tmp_path):
    """The whole refusal a user reads when a byte count differs: the two sizes (len of the bytes written, the
    report's figure) and the two causes it can have."""
    d, doc = folder_and_report(tmp_path)
    doc["subject"]["files"][0]["size"] = len(WEIGHTS) + 1
    with pytest.raises(GateError) as e:
        bind(d, doc)
    assert e.value.message == (f"model.safetensors: {len(WEIGHTS)} bytes in {d}, {len(WEIGHTS) + 1} in the report "
                               "(changed after verify, or the report is of another checkpoint)")


def test_an_extra_weight_against_a_report_without_a_source_names_the_subject_as_unknown(tmp_path):
    """A report whose subject has no `source` (a hand-edited one; the schema requires it, bind reads what it is
    given): the refusal's "its subject:" says "?", not a made-up name."""
    d, doc = folder_and_report(tmp_path, extra={"model-extra.safetensors": b"x"})
    del doc["subject"]["source"]
    with pytest.raises(GateError) as e:
        bind(d, doc)
    assert e.value.message == (f"model-extra.safetensors: in {d} but not in the report: the report is of another "
                               "checkpoint (its subject: ?)")


# load_report / check_report: what push says before it hashes anything. Each expected message is the full line a
# user reads, naming the option (kconvert/commands/push.py calls load_report then check_report); the OS's part of
# "cannot read" is strerror(ENOTDIR), "Not a directory" (glibc's text for POSIX ENOTDIR, which open(2) returns when a
# path's directory component is a regular file); the schema's part is jsonschema's "'x' is a required property"
# (jsonschema's `required` validator) at "(root)" for a missing top-level key.


def test_load_report_refusals_name_the_path_and_what_is_wrong(tmp_path):
    missing = tmp_path / "verify.json"
    with pytest.raises(InputError) as e:
        load_report(missing)
    assert e.value.message == f"--report {missing}: no such report"
    assert e.value.hint == "run `kconvert verify ... --json > verify.json` first"

    with pytest.raises(InputError) as e:
        load_report(tmp_path)
    assert e.value.message == f"--report {tmp_path}: is a folder, not a report"

    (tmp_path / "afile").write_text("x")
    under_a_file = tmp_path / "afile" / "verify.json"
    with pytest.raises(InputError) as e:
        load_report(under_a_file)
    assert e.value.message == f"--report {under_a_file}: cannot read: Not a directory"

    arr = tmp_path / "list.json"
    arr.write_text("[1, 2]")
    with pytest.raises(InputError) as e:
        load_report(arr)
    assert e.value.message == f"--report {arr}: not a JSON object"


def test_load_report_schema_refusal_names_the_file_or_says_report_for_a_dict(tmp_path):
    """A JSON object that is not a report (no `schema_version`, the schema's first required key): the refusal
    starts with the option and the file's path when read from a file, with the word "report" when handed a dict."""
    f = tmp_path / "other.json"
    f.write_text("{}")
    with pytest.raises(InputError) as e:
        load_report(f)
    assert e.value.message == f"--report {f}: (root): 'schema_version' is a required property"
    with pytest.raises(InputError) as e:
        load_report({})
    assert e.value.message == "report: (root): 'schema_version' is a required property"


def test_check_report_refuses_another_command_a_failed_verdict_and_no_live_results():
    """push publishes only what `kconvert verify` passed live (docs/manual.md, the push row: "a passing verify
    report"): each refusal is the full line a user reads, naming what the report does say."""
    with pytest.raises(GateError) as e:
        check_report({"command": "inspect", "verdict": "pass", "live": {}})
    assert e.value.message == ("the report is from `kconvert inspect`, not `kconvert verify`; push needs a verify "
                               "report")
    again = "`kconvert verify '<dir>' --target '<target>' --report verify.json`"  # every refusal prints the way on
    assert e.value.hint == f"write one: {again}"
    with pytest.raises(GateError) as e:
        check_report({"command": "verify", "verdict": "fail", "live": {"x": 1}})
    assert e.value.message == ("the report's verdict is 'fail', not 'pass'; push publishes only a draft that passed "
                               "verification")
    assert e.value.hint.endswith(f"verify again: {again}")
    with pytest.raises(GateError) as e:
        check_report({"command": "verify", "verdict": "pass", "live": None})
    assert e.value.message == "the report has no live results; push publishes only a draft verified live"
    assert e.value.hint == f"verify it live (the `live` extra, or `gpu` on GPUs): {again}"
    check_report({"command": "verify", "verdict": "pass", "live": {"x": 1}})  # passes: no exception
