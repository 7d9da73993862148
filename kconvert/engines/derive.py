"""What a vLLM release's answers to the probe set (kconvert/engines/probes.py) say about each fact of an engine row:
the reading from answers to facts, in one place. Pure: `kconvert engines learn` runs the release's code
(kconvert/runners/engine_oracle.py) and stores these facts in its learned file, which the rows read
(kconvert/engines/learned/).

Each fact is {"value": ..., "from": [the release's functions that answered, "vllm/<file>.py:<line> <name>"],
"probes": [the probes whose answers settle it]}. A value per runner is a dict {"v1": ..., "v2": ...} over the
runners the release has.
"""
from __future__ import annotations

from typing import Any

from kconvert.engines.probes import ID_PATHS, IDS, LAYER_NAMES, OTHER_IDS, TARGET_CONTEXT

# The EAGLE-3 draft classes of vLLM's registry, by kconvert's family name (registry.py _SPECULATIVE_DECODING_MODELS)
EAGLE3_CLASSES = {"Eagle3LlamaForCausalLM": "llama", "Eagle3Qwen3ForCausalLM": "qwen3",
                  "Eagle3DeepseekV2ForCausalLM": "mla"}
FAMILIES = ("llama", "qwen3", "mla")

# Facts a release's code cannot answer without a GPU or an engine run, said by `kconvert engines learn`.
NOT_LEARNED = (
    "which residual stream an id names (the target's capture during a forward pass: llama.py / deepseek_v2.py / "
    "gpt_oss.py _maybe_add_hidden_state): read by hand",
    "which runner vLLM picks on a machine (config/vllm.py use_v2_model_runner reads Triton and the platform): read "
    "by hand",
    "whether a draft's own embed_tokens replace the target's (the proposer decides at load, after the target is "
    "built): read by hand",
    "acceptance: only a live run measures it (kconvert verify on a GPU)",
)


def _fn(doc: dict[str, Any], key: str, name: str) -> str:
    return f"{doc['functions'][key]} {name}" if key in doc["functions"] else name


def _model(a: dict[str, Any]) -> dict[str, Any]:
    m = a.get("model")
    return m if isinstance(m, dict) else {}


def _loads(a: dict[str, Any]) -> bool:
    """The draft class built and its load_weights took every tensor but the ones it skips."""
    m = _model(a)
    return bool(m) and "raises" not in m and "load_weights" not in m


def _fed(a: dict[str, Any], runner: str) -> Any:
    got = a.get(runner)
    return list(got) if isinstance(got, (list, tuple)) else got


def _raised(x: Any) -> str | None:
    return x.get("raises") if isinstance(x, dict) else None


def derive_vllm(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The row facts a vLLM release's answers settle (doc: the child's output over vllm_probes(), with the release
    answers)."""
    A = doc["drafts"]
    R = doc["release"]
    runners = sorted(R["runners"])
    facts: dict[str, dict[str, Any]] = {}

    def put(name: str, value: Any, sources: list[str], probes: list[str]) -> None:
        facts[name] = {"value": value, "from": sources, "probes": probes}

    put("runners", runners, [f"{R['runners'][r]} ({'Model Runner V1' if r == 'v1' else 'Model Runner V2'})"
                             for r in runners], [])
    env = R["env_v2_model_runner_0"]
    put("v1_refused", _raised(env), [_fn(doc, "validate_environ", "Platform.validate_environ")], [])

    # where each runner reads the ids: a path is read when ids kept only there are fed; of two, the one fed wins
    reads: dict[str, list[list[str]]] = {}
    for r in runners:
        read = [k for k in ID_PATHS if _fed(A[f"ids-at-{k}"], r) == IDS]
        keys = list(ID_PATHS)

        def wins(a_: str, b_: str) -> bool:
            pair = f"ids-at-{a_}-vs-{b_}" if keys.index(a_) < keys.index(b_) else f"ids-at-{b_}-vs-{a_}"
            fed = _fed(A[pair], r)
            first = a_ if keys.index(a_) < keys.index(b_) else b_
            return fed == (IDS if a_ == first else OTHER_IDS)

        import functools
        ordered = sorted(read, key=functools.cmp_to_key(lambda x, y: -1 if wins(x, y) else 1))
        reads[r] = [list(ID_PATHS[k]) for k in ordered]
    put("aux_read_paths", reads, [_fn(doc, r, "get_eagle3_aux_layers_from_config" if r == "v2" else
                                      "GPUModelRunner._get_eagle3_aux_layers_from_config") for r in runners],
        sorted(k for k in A if k.startswith("ids-at-")))

    # heads without aux states (eagle_config.use_aux_hidden_state false)
    head = A["no-aux-head"]
    honours = {"v1": head.get("v1_use_aux_hidden_state"), "v2": head.get("v2_requires_aux_hidden_states")}
    no_aux = {}
    for r in runners:
        if honours[r] is False:
            no_aux[r] = "yes"
        elif honours[r] is None and r == "v2" and honours.get("v1") is False:
            no_aux[r] = "v1-runner-only"  # 0.32: V2 has no such function and collects aux states for every draft
        else:
            no_aux[r] = "no"
    put("no_aux_heads", no_aux, [_fn(doc, k, name) for k, name in (
        ("v1_use_aux_hidden_state", "_get_eagle3_use_aux_hidden_state_from_config"),
        ("requires_aux_hidden_states", "requires_aux_hidden_states")) if k in doc["functions"]], ["no-aux-head"])

    # how many aux states the draft class sizes fc for
    n = {k: _model(A[k]).get("num_aux_hidden_states") for k in ("num-aux-4", "ids-4", "num-aux-3-ids-4", "ids-none")}
    order = []
    if n["num-aux-4"] == 4:
        order.append("num_aux_hidden_states")
    if n["ids-4"] == 4:
        order.append("len(eagle_config.eagle_aux_hidden_state_layer_ids)")
    if n["num-aux-3-ids-4"] == 4 and len(order) == 2:
        order.reverse()
    put("reads_num_aux_from", ", else ".join(order + [str(n["ids-none"])]),
        [_fn(doc, "initialize_model", "initialize_model (the draft class's num_aux_hidden_states)")],
        ["num-aux-4", "ids-4", "num-aux-3-ids-4", "ids-none"])

    # the draft classes: layer names, layers, EAGLE 3.1's norms, model.-prefixed names, skipped tensors
    built = [f for f in FAMILIES if _model(A[f"{f}-names-layers"]).get("class") in EAGLE3_CLASSES]
    load = _fn(doc, "initialize_model", "initialize_model + the class's load_weights")
    put("layer_names", {f: [LAYER_NAMES[k] for k in LAYER_NAMES if _loads(A[f"{f}-names-{k}"])] for f in built},
        [load], [f"{f}-names-{k}" for f in built for k in LAYER_NAMES])
    put("multi_layer", [f for f in built if _loads(A[f"{f}-two-layers"])
                        and _model(A[f"{f}-two-layers"]).get("num_layers") == 2],
        [load], [f"{f}-two-layers" for f in built])
    put("norm_before_fc", {f: "input_norm.weight" in _model(A[f"{f}-norm-before-fc"]).get("loaded", {})
                           for f in built}, [load], [f"{f}-norm-before-fc" for f in built])
    fc_norm = {f: all(f"fc_norm.{i}.weight" in _model(A[f"{f}-fc-norm"]).get("loaded", {}) for i in range(3))
               for f in built}
    put("fc_norm", fc_norm.get("llama"), [load], [f"{f}-fc-norm" for f in built])
    put("fc_norm_by_family", fc_norm, [load], [f"{f}-fc-norm" for f in built])
    put("norm_output", _model(A["llama-norm-output"]).get("norm_output") is True,
        [load + " (the draft model's norm_output)"], ["llama-norm-output"])
    put("model_prefix_ok", [f for f in built if _loads(A[f"{f}-names-model-prefixed"])], [load],
        [f"{f}-names-model-prefixed" for f in built])
    put("ignored_tensors", sorted(_model(A["llama-names-layers"]).get("dropped") or []), [load],
        ["llama-names-layers"])

    # architectures: EAGLEConfig's prefix, then the registry; the speculators format's own name
    archs = {}
    for name, ans in R["architectures"].items():
        if not isinstance(ans, dict):
            continue
        # a plain config naming it (after EAGLEConfig's prefix), or the registry's own EAGLE-3 entry (the name a
        # speculators update function writes: P-EAGLE's PeagleLlamaForCausalLM in 0.32)
        cls = next((c for c in (ans.get("class"), ans.get("direct")) if c and c[1] in EAGLE3_CLASSES), None)
        if cls:
            archs[name] = EAGLE3_CLASSES[cls[1]]
    spec = A["speculators-llama"]
    spec_ok = _loads(spec) and _model(spec).get("class") in EAGLE3_CLASSES
    if spec_ok:
        archs["Eagle3Speculator"] = EAGLE3_CLASSES[_model(spec)["class"]]
    put("architectures", dict(sorted(archs.items())),
        [_fn(doc, "EAGLEConfig", "EAGLEConfig (the Eagle3 prefix)"),
         _fn(doc, "registry", "_SPECULATIVE_DECODING_MODELS")],
        ["speculators-llama"])
    mla = A["mla-model-type-deepseek_v3"]
    refused = [] if (_model(mla).get("class") == "Eagle3DeepseekV2ForCausalLM") else ["deepseek_v3"]
    put("mla_model_type_refused", refused, [_fn(doc, "SpeculativeConfig", "SpeculativeConfig")],
        ["mla-model-type-deepseek_v3"])
    if refused:
        facts["mla_model_type_refused"]["says"] = _raised(mla.get("served")) or _raised(mla.get("model"))

    # the speculators format
    put("reads_speculators_format", spec_ok, [_fn(doc, "get_config", "get_config (SpeculatorsConfig)")],
        ["speculators-llama", "speculators-qwen3"])
    put("speculators_norm_before_residual_default", (spec.get("hf_keys") or {}).get("norm_before_residual"),
        [_fn(doc, "get_config", "get_config (speculators/algos.py update_eagle3)")], ["speculators-llama"])

    # positions: a draft shorter than the target, with a cache-only rope type and with yarn
    short = {k: A[k].get("served") or {} for k in ("short-default-rope", "short-yarn-rope")}
    raised = {k: (s.get("draft_max_position_embeddings") or 0) >= TARGET_CONTEXT for k, s in short.items()}
    put("raises_max_positions", any(raised.values()),
        [_fn(doc, "draft_max_position_embeddings", "_maybe_override_draft_max_position_embeddings")],
        list(short))
    rope = None
    if raised["short-default-rope"] and not raised["short-yarn-rope"]:
        rope = R.get("cache_only_rope_types") or ["default"]
    put("raises_max_positions_rope", rope,
        [_fn(doc, "draft_max_position_embeddings", "_maybe_override_draft_max_position_embeddings"),
         "vllm/config/speculative.py _CACHE_ONLY_ROPE_TYPES"], list(short))
    put("limits_served_to_draft", {r: (short["short-yarn-rope"].get(f"{r}_max_model_len") or TARGET_CONTEXT)
                                   < TARGET_CONTEXT for r in runners},
        [_fn(doc, "limit_max_model_len_to_draft", "VllmConfig._limit_max_model_len_to_draft")
         if "limit_max_model_len_to_draft" in doc["functions"] else
         _fn(doc, "SpeculativeConfig", "SpeculativeConfig (the release has no _limit_max_model_len_to_draft: the "
                                       "target's max_model_len is served)")], ["short-yarn-rope"])

    # what the release refuses outright: P-EAGLE
    pe = A["peagle-speculators"]
    says = _raised(pe.get("hf_config")) or _raised(pe.get("served"))
    put("refuses", {"peagle": says} if says else {},
        [f"{R.get('speculators_types', {}).get('peagle', 'vllm/transformers_utils/configs/speculators/algos.py')} "
         "update_peagle", _fn(doc, "get_config", "get_config")], ["peagle-speculators"])
    if not says:
        feats = pe.get("v2_unsupported_features")
        facts["refuses"]["detail"] = {"peagle": {"speculative_config": pe.get("speculative_config"),
                                                 "v2_unsupported_features": feats}}
    return facts


# ---- SGLang: the answers tests/sglang_oracle/record.py records from SGLang's own code (its loaders' load_weights
# and each target family's set_eagle3_layers_to_capture, run on CPU in a venv of their own)

# SGLang's model files by the target family kconvert's rows name (kconvert.engines.expectations.target_family)
SGLANG_CAPTURE_FAMILY = {"llama": "*", "qwen2": "*", "qwen3": "*", "glm4_moe": "*", "minimax_m2": "*",
                         "deepseek_v2": "deepseek", "glm4_moe_lite": "deepseek", "gpt_oss": "gpt_oss"}
SGLANG_DRAFT_CLASSES = {"LlamaForCausalLMEagle3": "llama", "Eagle3DeepseekV2ForCausalLM": "mla"}


def capture_rule(probes: list[dict[str, Any]]) -> str | None:
    """Which reading of explicit ids (kconvert.engines.expectations AUX_RULES) every probe of one
    set_eagle3_layers_to_capture agrees with (ids as given, the layers it captures, the target's layer count)."""
    def fits(rule: str, ids: list[int], got: list[int], n: int) -> bool:
        plus = [i + 1 for i in ids]
        want = {"input": ids, "output": plus, "output-if-first-is-1": plus if ids[0] == 1 else ids,
                "output-unless-final": ids if max(ids) == n else plus}[rule]
        return sorted(want) == sorted(got)
    explicit = [p for p in probes if p.get("ids")]
    for rule in ("input", "output", "output-if-first-is-1", "output-unless-final"):
        if explicit and all(fits(rule, p["ids"], p["layers_to_capture"], p["num_layers"]) for p in explicit):
            return rule
    return None


def derive_sglang(rec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The row facts an SGLang recording settles (tests/data/sglang_oracle.json): how each target family's capture
    reads explicit ids, and what each draft class loads."""
    facts: dict[str, dict[str, Any]] = {}

    def put(name: str, value: Any, sources: list[str], probes: list[str], **extra: Any) -> None:
        facts[name] = {"value": value, "from": sources, "probes": probes, **extra}

    cap = rec["capture"]
    rules = {fam: capture_rule(c["probes"]) for fam, c in sorted(cap.items()) if fam in SGLANG_CAPTURE_FAMILY}
    aux_rule: dict[str, str] = {}
    for fam, rule in rules.items():
        key = SGLANG_CAPTURE_FAMILY[fam]
        if rule is not None and (key not in aux_rule or fam in ("llama", "deepseek_v2", "gpt_oss")):
            aux_rule[key] = rule
    put("aux_rule", dict(sorted(aux_rule.items())),
        [f"{cap[f]['source']} set_eagle3_layers_to_capture" for f in sorted(rules)],
        [f"capture {f}" for f in sorted(rules)], by_model_file=rules)

    loaders = {d["draft_class"]: d["loader"] for d in rec["drafts"].values() if d.get("loader")}
    names = {SGLANG_DRAFT_CLASSES[p["draft_class"]]: p for p in rec["name_probes"]
             if p["draft_class"] in SGLANG_DRAFT_CLASSES}
    cfg = rec["config_probes"]

    def loaded(results: dict[str, Any]) -> bool:
        return bool(results) and all(v.get("outcome") in ("loaded", "renamed") for v in results.values())

    def src(fam: str) -> str:
        cls = next(c for c, f in SGLANG_DRAFT_CLASSES.items() if f == fam)
        return f"{loaders.get(cls, cls)} {cls}.load_weights"

    fams = sorted(names)
    multi = [f for f in fams if cfg.get(f"{f} multi-layer", {}).get("outcome") == "built"]
    put("multi_layer", multi, [src(f) for f in fams], [f"{f} multi-layer" for f in fams])
    # midlayer.* is each class's own name; layers.0.* loads too; layers.N.* for a class that builds N layers
    put("layer_names", {f: ["midlayer."] + (["layers." if f in multi else "layers.0."]
                                           if loaded(names[f]["results"].get("layers.0. instead of midlayer.", {}))
                                           else []) for f in fams},
        [src(f) for f in fams], [f"name probes {f}" for f in fams])
    put("norm_before_fc", {f: (cfg.get(f"{f} norm_before_fc", {}).get("tensors", {}).get("input_norm.weight", {})
                               .get("outcome") == "loaded") for f in fams},
        [src(f) for f in fams], [f"{f} norm_before_fc" for f in fams])
    fc = {f: loaded(cfg.get(f"{f} fc_norm", {}).get("tensors", {})) for f in fams}
    put("fc_norm", all(fc.values()), [src(f) for f in fams], [f"{f} fc_norm" for f in fams], by_family=fc)
    # the decoder layer, fc and norm under `model.` (what the row's model_prefix_ok is about; lm_head and t2d are
    # top-level names a draft class reads or skips on their own)
    put("model_prefix_ok", [f for f in fams if all(
        v.get("outcome") in ("loaded", "renamed") for k, v in names[f]["results"].get("model.-prefixed", {}).items()
        if k.startswith(("model.midlayer.", "model.layers.", "model.fc.", "model.norm.")))],
        [src(f) for f in fams], [f"name probes {f}" for f in fams])
    return facts
