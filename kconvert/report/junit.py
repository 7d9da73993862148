"""JUnit XML for CI systems: one testcase per static rule and per gate check (threshold, lossless).

Written with the standard library's ElementTree: the format is a handful of elements and no JUnit library on
PyPI is better kept than that."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from kconvert.report.concise import finding_line_full as finding_line
from kconvert.rules import REGISTRY


def render_junit(doc: dict[str, Any]) -> str:
    suites = ET.Element("testsuites", name="kconvert")
    static = ET.SubElement(suites, "testsuite", name="kconvert.static")
    by_id: dict[str, list[dict[str, Any]]] = {}
    for f in doc.get("findings", []):
        by_id.setdefault(f["id"], []).append(f)
    n = fails = skips = 0
    for rid, rule in sorted(REGISTRY.items()):
        n += 1
        tc = ET.SubElement(static, "testcase", classname=f"static.{rule.category}", name=f"{rid} {rule.name}")
        found = by_id.get(rid, [])
        failing = ("error", "warning") if doc.get("fail_on") == "warning" else ("error",)
        errors = [f for f in found if f["severity"] in failing]
        if rule.needs_target and doc.get("target") is None:
            ET.SubElement(tc, "skipped", message="needs --target")
            skips += 1
        elif errors:
            fails += 1
            fl = ET.SubElement(tc, "failure", message=errors[0]["message"], type=rule.category)
            # the concise line: where, id, severity, category, message, evidence in full, fixability
            fl.text = "\n".join(finding_line(doc, f) for f in errors)
        if found and not errors:
            ET.SubElement(tc, "system-out").text = "\n".join(finding_line(doc, f) for f in found)
    static.set("tests", str(n))
    static.set("failures", str(fails))
    static.set("skipped", str(skips))

    gate = ET.SubElement(suites, "testsuite", name="kconvert.gate")
    gn = gf = 0
    live = doc.get("live")
    gn += 1
    tc = ET.SubElement(gate, "testcase", classname="live", name="engine run")
    if live is None and doc.get("dry_run") is not None:
        # a dry run planned the engine run and started nothing: a CI dashboard must not read it as a live pass
        ET.SubElement(tc, "skipped", message="dry run: no engine was started and nothing was measured")
    elif live is None:
        ET.SubElement(tc, "skipped", message="no live run (static checks failed or not requested)")
    else:
        acc = live.get("acceptance") or {}
        ET.SubElement(tc, "system-out").text = (
            f"mean acceptance length {acc.get('mean_acceptance_length')}, acceptance rate "
            f"{acc.get('acceptance_rate')}, per position {acc.get('per_position')}")
        if live.get("lossless") is not None:
            gn += 1
            tc2 = ET.SubElement(gate, "testcase", classname="live", name="lossless (greedy outputs identical)")
            if not live["lossless"].get("identical"):
                gf += 1
                ET.SubElement(tc2, "failure", message=f"first difference: {live['lossless'].get('first_difference')}")
    for c in (doc.get("thresholds") or {}).get("checks", []):
        gn += 1
        tc = ET.SubElement(gate, "testcase", classname="threshold", name=c["name"])
        if not c["passed"]:
            gf += 1
            ET.SubElement(tc, "failure", message=c["message"])
    gate.set("tests", str(gn))
    gate.set("failures", str(gf))
    suites.set("tests", str(n + gn))
    suites.set("failures", str(fails + gf))
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def render_junit_error(command: str, kind: str, message: str, hint: str | None = None) -> str:
    """A run that could not judge the draft (bad input, engine failure) as one errored testcase, so a CI test
    report shows the failure instead of an empty suite."""
    suites = ET.Element("testsuites", name="kconvert", tests="1", failures="0", errors="1")
    suite = ET.SubElement(suites, "testsuite", name=f"kconvert.{command}", tests="1", failures="0", errors="1")
    tc = ET.SubElement(suite, "testcase", classname="kconvert", name=command)
    err = ET.SubElement(tc, "error", message=message, type=kind)
    err.text = message + (f"\nhint: {hint}" if hint else "")
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"
