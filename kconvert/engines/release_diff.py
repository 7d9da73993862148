"""What changed between two engine releases for EAGLE-3 drafts, in the words a deployer acts on: which key a runner
reads the aux ids from, which runner exists, what the release refuses, what context it serves. Pure: it compares two
learned files (kconvert/engines/learned/) fact by fact; `kconvert engines diff A B` prints it.

One renderer per fact (`_SAY`); a fact without one is said generically ("<fact>: <A> -> <B>"), so a fact added to
the learner is never silently left out of a diff.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from kconvert.engines.probes import ID_PATHS

RUNNER = {"v1": "Model Runner V1", "v2": "Model Runner V2"}


@dataclass(frozen=True)
class Change:
    fact: str
    before: Any
    after: Any
    says: str  # one sentence: what changed and what a deployer does about it
    kind: str = "behaviour"  # "behaviour" (what the engine does) or "code" (where the code that does it lives)

    def to_dict(self) -> dict[str, Any]:
        return {"fact": self.fact, "before": self.before, "after": self.after, "says": self.says, "kind": self.kind}


def _label(doc: Mapping[str, Any]) -> str:
    return f"{doc['engine']} {doc['release']}"


def _path(p: list[str]) -> str:
    return ".".join(p)


def _runners(a: list[str], b: list[str], A: str, B: str, da: Mapping[str, Any], db: Mapping[str, Any]) -> list[str]:
    out = []
    for r in sorted(set(a) - set(b)):
        why = db["facts"].get("v1_refused", {}).get("value") if r == "v1" else None
        out.append(f"{RUNNER[r]} exists in {A} and is gone in {B}"
                   + (f" ({B} says: \"{why}\")" if why else "")
                   + (": serve lines, cards and runs for it must not set VLLM_USE_V2_MODEL_RUNNER=0; a "
                      f"`{B.split()[1].rsplit('.', 1)[0]}/v1` row does not exist" if r == "v1" else ""))
    for r in sorted(set(b) - set(a)):
        out.append(f"{RUNNER[r]} is new in {B}")
    return out


def _reads(a: Mapping[str, Any], b: Mapping[str, Any], A: str, B: str, *_: Any) -> list[str]:
    """Per place a draft may keep its ids: which runners read it before and after."""
    out = []
    for key, path in ID_PATHS.items():
        ra = sorted(r for r, paths in a.items() if list(path) in paths)
        rb = sorted(r for r, paths in b.items() if list(path) in paths)
        if ra == rb or (rb and sorted(set(ra) & set(b)) == rb):
            continue  # unchanged, or changed only by a runner's removal while another still reads it

        def who(rs: list[str]) -> str:
            return " and ".join(RUNNER[r] for r in rs) if rs else "no runner"
        act = (f"; drafts whose ids sit only there get the target's defaults on {B}: write them at the top-level "
               "`eagle_aux_hidden_state_layer_ids` (kconvert fix does)" if not rb else "")
        out.append(f"ids kept only in `{_path(list(path))}`: read by {who(ra)} in {A}, by {who(rb)} in {B}{act}")
    for r in sorted(set(a) & set(b)):
        if a[r] != b[r]:
            out.append(f"{RUNNER[r]} reads the ids from {' then '.join(_path(p) for p in a[r])} in {A}, from "
                       f"{' then '.join(_path(p) for p in b[r]) or 'nowhere'} in {B}")
    return out


def _per_runner(name: str, sentence: Callable[[str, Any, Any], str]) -> Callable[..., list[str]]:
    def say(a: Mapping[str, Any], b: Mapping[str, Any], A: str, B: str, *_: Any) -> list[str]:
        out = []
        for r in sorted(set(a) | set(b)):
            if r in a and r in b and a[r] != b[r]:
                out.append(sentence(RUNNER[r], a[r], b[r]).format(A=A, B=B))
        return out
    return say


def _served(a: Mapping[str, bool], b: Mapping[str, bool], A: str, B: str, *_: Any) -> list[str]:
    """Which runners lower the served context to a short draft's, before and after (a runner's removal counts: the
    deployments it served now run another)."""
    def who(v: Mapping[str, bool]) -> str:
        on = [RUNNER[r] for r in sorted(v) if v[r]]
        if not on:
            return "no runner"
        return "every runner (" + ", ".join(on) + ")" if len(on) == len(v) else " and ".join(on) + " only"
    if who(a) == who(b):
        return []
    return [f"served context: when a draft's positions are not raised to the target's, {who(a)} lowers the served "
            f"max_model_len to the draft's in {A}, {who(b)} in {B}: give such a draft the target's "
            "max_position_embeddings (or a cache-only rope type), or plan for the shorter context"]


def _no_aux(runner: str, x: str, y: str) -> str:
    words = {"yes": "honours", "no": "ignores", "v1-runner-only": "ignores (only V1 honours)"}
    return (f"heads without aux states (eagle_config.use_aux_hidden_state false): {runner} {words.get(x, x)} the flag "
            f"in {{A}}, {words.get(y, y)} it in {{B}}")


def _refuses(a: Mapping[str, str], b: Mapping[str, str], A: str, B: str, *_: Any) -> list[str]:
    out = []
    for m in sorted(set(a) | set(b)):
        if m in b and m not in a:
            out.append(f"{m}: {A} loads it, {B} refuses it (\"{b[m]}\"): serve such a draft on {A}, or retrain it "
                       "as an EAGLE-3 draft")
        elif m in a and m not in b:
            out.append(f"{m}: refused by {A} (\"{a[m]}\"), loaded by {B}")
        elif a[m] != b[m]:
            out.append(f"{m}: refused by both; {A} says \"{a[m]}\", {B} says \"{b[m]}\"")
    return out


def _rope(a: Any, b: Any, A: str, B: str, *_: Any) -> list[str]:
    def words(v: Any) -> str:
        return "any rope type" if v is None else "rope types " + ", ".join(v) + " only"
    return [f"a short draft's max_position_embeddings is raised to the target's for {words(a)} in {A}, for "
            f"{words(b)} in {B}"]


def _archs(a: Mapping[str, str], b: Mapping[str, str], A: str, B: str, *_: Any) -> list[str]:
    out = []
    gone = sorted(set(a) - set(b))
    new = sorted(set(b) - set(a))
    if gone:
        out.append(f"architectures {A} maps to an EAGLE-3 draft class and {B} does not: {', '.join(gone)} (a draft "
                   f"naming only these is not built as an EAGLE-3 draft by {B})")
    if new:
        out.append(f"architectures new in {B}: {', '.join(new)}")
    for n in sorted(set(a) & set(b)):
        if a[n] != b[n]:
            out.append(f"architecture {n}: the {a[n]} draft class in {A}, the {b[n]} one in {B}")
    return out


_SAY: dict[str, Callable[..., list[str]]] = {
    "runners": _runners,
    "aux_read_paths": _reads,
    "limits_served_to_draft": _served,
    "no_aux_heads": _per_runner("no_aux_heads", _no_aux),
    "refuses": _refuses,
    "raises_max_positions_rope": _rope,
    "architectures": _archs,
}
# facts said by another fact's sentence, or too small to say apart
_SILENT = frozenset({"v1_refused", "fc_norm_by_family"})


def diff_releases(da: Mapping[str, Any], db: Mapping[str, Any]) -> list[Change]:
    """Every fact that differs between two learned files (`da` the older), said; then the functions that answered
    from another file (where the code moved)."""
    A, B = _label(da), _label(db)
    out: list[Change] = []
    fa, fb = da["facts"], db["facts"]
    for name in [*fa, *(n for n in fb if n not in fa)]:
        if name in _SILENT:
            continue
        va = fa.get(name, {}).get("value")
        vb = fb.get(name, {}).get("value")
        if va == vb:
            continue
        say = _SAY.get(name)
        lines = say(va, vb, A, B, da, db) if say else [f"{name}: {va!r} in {A}, {vb!r} in {B}"]
        out += [Change(name, va, vb, s) for s in lines]
    ga, gb = da.get("functions", {}), db.get("functions", {})
    for key in sorted(set(ga) | set(gb)):
        a_file = ga.get(key, "").split(":")[0]
        b_file = gb.get(key, "").split(":")[0]
        if a_file != b_file:
            out.append(Change(key, ga.get(key), gb.get(key), (
                f"{key}: answered by {ga[key]} in {A}, by {gb[key]} in {B}" if key in ga and key in gb else
                f"{key}: {ga[key]} in {A}, gone in {B}" if key in ga else f"{key}: new in {B}, {gb[key]}"),
                kind="code"))
    return out
