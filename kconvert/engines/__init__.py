"""The engines' facts: what each engine version does with a draft, and the arithmetic of what it measures. Pure:
no process is started, no engine imported, no file read.

`expectations` holds one row per engine version (the facts the rules consult); `serve_lines` prints the commands
that serve a draft and reads a production `--speculative-config`; `acceptance` turns counters into figures;
`metrics` reads vLLM's Prometheus counters from scrape text; `live_messages` is the engine-neutral request and
result of a live run (what crosses its process boundary); `installed` says which engine version and platform are
here. The code that starts and measures engines is `kconvert.runners`.
"""
