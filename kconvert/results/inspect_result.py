"""What `kconvert.inspect` returns: the inspection and its JSON report."""
from __future__ import annotations

from typing import Any

from kconvert.results.document import build_report
from kconvert.results.inspection import Inspection


class InspectResult(Inspection):
    """What `kconvert.inspect` found. `to_dict()` is the `kconvert inspect --json` report."""

    def to_dict(self, *, hashes: bool = False) -> dict[str, Any]:
        """The JSON report (schemas/report.schema.json), as `kconvert inspect --json` prints it; `hashes` adds the
        sha256 of every local file (`--hash`)."""
        return build_report(self, command="inspect", hashes=hashes)

