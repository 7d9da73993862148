"""The guards: one place per kind of trust (docs/design.md "Guards").

Everything kconvert did not write is untrusted. Each kind passes one guard here, shared by the commands and the
library, as safetensors keeps its header checks in one function:

- `kconvert.guard.paths`: what may be read (a regular file, bounded, UTF-8, bounded nesting) and what may be written
  or replaced (new, empty, or kconvert's own earlier output; never a device, FIFO, socket or anything inside an
  input);
- `kconvert.guard.text`: one escape at the rendering boundary, for every output format;
- `kconvert.guard.urls`: the one check of a server URL (`verify --server`) before anything is sent to it.

The engine-argument policy is an engine fact and lives with them (`kconvert.engines`).
"""
