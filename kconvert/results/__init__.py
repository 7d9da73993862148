"""What the commands return, and the JSON report each result is: below the report's renderers, above the rules.

`inspection` (the findings and the gate) is the base of every result; `inspect`, `fix`, `verify` and `score` hold
each command's result and its `to_dict()`; `document` builds the one report shape (schemas/report.schema.json)
with `locations` (the file and config line of each finding) and `next_steps` (the commands to run next);
`thresholds` is the acceptance gate. `kconvert.report` renders these documents and imports nothing above this
package; the commands (`kconvert.inspect`, `kconvert.fix`, ...) fill them.
"""
