"""The commands: what `kconvert inspect`, `fix`, `verify` and `push` do, as library functions.

The package `kconvert` re-exports them (`kconvert.inspect(...)`); they live here, not in a module named `kconvert.inspect`, so
that no module takes the name of a public function (docs/design.md#layers). `kconvert.score` keeps its own
package: its public function is `kconvert.score.score`, whose module name shadows nothing.
"""
