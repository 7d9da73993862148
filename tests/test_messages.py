"""One message per fact, no contradictions, whole lines (issue #48 item 3), over every rule's messages as they are
printed: every shipped draft (tests/shipped.py, the list the engine oracles record: the zoo, the producers' drafts,
NeMo Automodel's and the examples), and a checkpoint of each other method K105 names, judged on every engine row.

- A message says which keys a row reads only as the row reads them: "<row> reads K" with K among the row's
  `aux_read_paths`, "<row> does not read K" with K outside them (K405 once said Model Runner V2 "also reads" one key
  and "does not read" eagle_config in one message). The rows are the engines' facts, recorded from each release's
  loader (kconvert/engines/expectations.py), and the row a message names is looked up by that name.
- Evidence at a config key that fix writes shows what fix writes there (K405's evidence once showed [1, 4, 6]
  where fix wrote [2, 5, 7]).
- Every message fits a concise line whole: at most MAX_MESSAGE characters (the concise line prints it whole, with its
  evidence; ruff's messages are a sentence). A source's citations belong in the rule's `why` (`kconvert rules ID`),
  what the files showed in the finding's evidence.
- Every severity a finding has is one `kconvert rules` lists for its rule (`Rule.severities`, read from the rule's
  code): K405 was listed as a warning and fired as an error.
"""
from __future__ import annotations

import re

import pytest

from kconvert.engines.expectations import ALL_ROWS
from tests import shipped

MAX_MESSAGE = 300
KEYS = ("eagle_config.eagle_aux_hidden_state_layer_ids", "eagle_config.layer_ids", "eagle_aux_hidden_state_layer_ids")
KEY = "|".join(re.escape(k) for k in KEYS)  # longest first: a dotted key is not read as its last part
ROW_NAME = r"vllm [\d.]+(?:/v1| \(Model Runner V2\))?|sglang [\w.-]+"
CLAIM = re.compile(rf"(?P<who>{ROW_NAME}) (?P<verb>does not read|reads) (?P<keys>(?:{KEY})(?:, (?:{KEY}))*)"
                   rf"(?![\w.])")


@pytest.fixture(scope="module")
def findings(tmp_path_factory) -> list[tuple[str, str, dict]]:
    """(draft, row key, finding as the report holds it) for every shipped draft and row."""
    import kconvert

    out = []
    for s in shipped.drafts(tmp_path_factory.mktemp("messages")):
        target = shipped.load_target(s.target)
        for row in ALL_ROWS:
            doc = kconvert.inspect(str(s.folder), target=target, engine=row.engine,
                                   engine_version=row.version).to_dict()
            out += [(s.key, row.key, f) for f in doc["findings"]]
    # and a checkpoint of every other method K105 names (tests/test_methods.py's, each cited there to its published
    # config; the zoo ships a DFlash one only): K105's message carries the row's serving options
    from tests import test_methods as m

    work = tmp_path_factory.mktemp("methods")
    others = {"dflash": m.dflash(work / "dflash"), "peagle": m.peagle_folder(work / "peagle", m.peagle_config()),
              "mtp": m.mtp(work / "mtp", model_type="deepseek_v3", archs=["DeepseekV3ForCausalLM"]),
              "mtp-unmapped": m.mtp(work / "mtp-k", model_type="kimi_k2", archs=["DeepseekV3ForCausalLM"])}
    for name, folder in others.items():
        for row in ALL_ROWS:
            doc = kconvert.inspect(str(folder), engine=row.engine, engine_version=row.version).to_dict()
            out += [(f"methods/{name}", row.key, f) for f in doc["findings"]]
    # every group of drafts is judged, and the rules whose messages once broke these checks fire among them
    assert {k.split("/", 1)[0] for k, _, _ in out} == {"zoo", "producers", "automodel", "examples", "methods"}
    assert len(out) > 300 and {f["id"] for _, _, f in out} >= {"K105", "K404", "K405", "K902"}
    return out


def row_named(name: str):
    key = name.replace(" (Model Runner V2)", "")
    return next(r for r in ALL_ROWS if r.key == key)


def claims(message: str) -> list[tuple[str, str, str]]:
    return [(m["who"], m["verb"], k) for m in CLAIM.finditer(message) for k in m["keys"].split(", ")]


def contradictions(message: str) -> list[str]:
    bad = []
    for who, verb, key in claims(message):
        reads = {".".join(p) for p in row_named(who).aux_read_paths}
        if (verb == "reads") != (key in reads):
            bad.append(f"{who} {verb} {key}, but its row reads {sorted(reads)}")
    return bad


def test_the_claim_reader_sees_the_old_contradiction():
    # K405's message before issue #48, on the V2 row: "also reads" the top-level key is true there, but the V1 row's
    # message said V2 "does not read eagle_config's ids" when the ids sat at eagle_config.layer_ids, which V2 reads
    said = ("vllm 0.32/v1 reads eagle_config.eagle_aux_hidden_state_layer_ids; vllm 0.32 (Model Runner V2) does not "
            "read eagle_config.layer_ids and would feed its defaults")
    assert claims(said) == [("vllm 0.32/v1", "reads", "eagle_config.eagle_aux_hidden_state_layer_ids"),
                            ("vllm 0.32 (Model Runner V2)", "does not read", "eagle_config.layer_ids")]
    assert contradictions(said) == ["vllm 0.32 (Model Runner V2) does not read eagle_config.layer_ids, but its row "
                                    "reads ['eagle_aux_hidden_state_layer_ids', 'eagle_config.layer_ids']"]


def test_no_message_says_a_runner_reads_what_its_row_does_not(findings):
    bad = {f"{f['id']} [{row}]: {f['message']}\n  " + "; ".join(c)
           for _, row, f in findings if (c := contradictions(f["message"]))}
    assert not bad, "\n".join(sorted(bad))
    assert any(claims(f["message"]) for _, _, f in findings)  # the reader found claims to hold


def test_evidence_at_a_key_fix_writes_is_what_fix_writes(findings):
    bad = []
    for draft, row, f in findings:
        writes = {op["path"] if isinstance(op["path"], str) else ".".join(op["path"]): op["value"]
                  for op in f.get("fix_ops") or [] if op.get("kind") == "set-config"}
        assert not f.get("fix_ops") or writes or f["fix_ops"][0].get("kind") != "set-config"
        for e in f["evidence"]:
            if e["where"] in writes and e["expected"] != writes[e["where"]]:
                bad.append(f"{draft} [{row}] {f['id']}: evidence {e['where']} expects {e['expected']}, fix writes "
                           f"{writes[e['where']]}")
    assert sorted(set(bad)) == []


def test_every_message_fits_a_concise_line_whole(findings):
    long = sorted({(len(f["message"]), f["id"], f["message"]) for _, _, f in findings
                   if len(f["message"]) > MAX_MESSAGE}, reverse=True)
    assert long == []


def test_every_severity_a_finding_has_is_listed_for_its_rule(findings):
    from kconvert.rules import REGISTRY

    seen: dict[str, set[str]] = {}
    for _, _, f in findings:
        seen.setdefault(f["id"], set()).add(f["severity"])
    unlisted = {rid: sorted(sev - set(REGISTRY[rid].severities())) for rid, sev in seen.items()
                if sev - set(REGISTRY[rid].severities())}
    assert unlisted == {}
    assert "error" in REGISTRY["K405"].severities()  # fires as an error on the V2 row (the README's draft)
