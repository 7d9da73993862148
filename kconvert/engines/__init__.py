"""Live engines: run a real inference engine with a draft next to its target and read its counters."""
