"""`--oracle`: the engine's own code asked about this draft and this target (kconvert/runners/engine_oracle.py runs
it; its answers arrive as `Context.oracle`), held against the static verdict of the row kconvert judged by. One
comparison per thing both answer, the same ones tests/test_vllm_oracle.py holds every row to over the shipped
drafts: the ids each runner feeds, fc width and aux count, errors while building and loading, the served context,
and the weights kept and dropped. K107 (kconvert/rules/architecture.py) says each disagreement, quoting both."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kconvert.rules.base import Context

# The rules whose errors mean "the engine cannot build or load this draft" (the architecture, another method's
# checkpoint, names it cannot place, an fc of another width): what an engine raising while building or loading is
# held against. By name: an id is written in the registry only (kconvert/rules/codes.py).
LOAD_RULES = ("architecture-unmapped", "mla-model-type-mtp", "other-method", "key-layout", "unexpected-tensors",
              "fc-width")


@dataclass(frozen=True)
class Disagreement:
    what: str
    kconvert: Any
    engine: Any
    where: str  # the engine's function that answered


def _raised(x: Any) -> str | None:
    return x.get("raises") if isinstance(x, dict) else None


def engine_error(answer: dict[str, Any]) -> tuple[str, str] | None:
    """(what raised, the message) where the engine's code refused this draft: reading its config, building its
    speculative config, building its class, or loading its tensors."""
    for key, what in (("hf_config", "get_config"), ("served", "SpeculativeConfig"), ("model", "initialize_model")):
        msg = _raised(answer.get(key))
        if msg:
            return what, msg
    msg = _raised((answer.get("model") or {}).get("load_weights"))
    return ("load_weights", msg) if msg else None


def _fc_refused(ctx: Context) -> bool:
    """Whether vLLM's draft class builds fc of another width than the checkpoint's fc.weight (its load then
    fails); a fc that loads but is fed another number of states fails when it runs, not at load."""
    from kconvert.rules.shapes import built_aux_count

    fc = ctx.draft.shape("fc.weight")
    th = ctx.draft.config.get("target_hidden_size") or (ctx.target.hidden_size if ctx.target else None) \
        or ctx.draft.hidden_size
    if not fc or len(fc) != 2 or not isinstance(th, int):
        return True
    return built_aux_count(ctx) * th != fc[1]


def static_load_errors(ctx: Context) -> list[str]:
    """The error findings of the load rules on this draft and row (run here, as run_rules runs them)."""
    from kconvert.rules.base import REGISTRY

    out = []
    by_name = {r.name: r for r in REGISTRY.values()}
    for name in LOAD_RULES:
        r = by_name[name]  # a rule renamed without this table: a KeyError the tests meet at once
        try:
            found = list(r.fn(ctx))
        except Exception:  # noqa: BLE001 - a check that cannot run is reported by run_rules itself
            continue
        if name == "fc-width" and not _fc_refused(ctx):
            continue  # fc is built as wide as its weight: it loads (the states fed at run time are K301's too)
        out += [f"{f.id} {f.message}" for f in found if f.severity == "error"]
    # a head whose rows are not the draft_vocab_size the draft class sizes it from (defaulting to vocab_size) does
    # not load: vLLM's Eagle3LlamaForCausalLM builds lm_head (and draft_id_to_target_id, only when that size differs
    # from the target's vocabulary) from it, so the tensor's shape or its d2t has no parameter to go to
    # (model_executor/models/llama_eagle3.py __init__ and load_weights). K501 says so; its other case (a size above
    # the target vocabulary that the head matches) loads and maps outside the vocabulary when it runs.
    d = ctx.draft
    declared = d.draft_vocab_size if d.draft_vocab_size is not None else d.vocab_size
    if d.lm_head_rows is not None and declared is not None and d.lm_head_rows != declared:
        out += [f"{f.id} {f.message}" for f in by_name["draft-vocab-size"].fn(ctx) if f.severity == "error"]
    return out


def disagreements(ctx: Context) -> list[Disagreement]:
    from kconvert.rules.aux_layers import fed_physical_ids
    from kconvert.rules.positions import vllm_positions
    from kconvert.rules.shapes import built_aux_count

    o = ctx.oracle or {}
    a = o.get("answer") or {}
    funcs = o.get("functions") or {}
    runner = o.get("runner") or ctx.engine.runner or "v2"
    out: list[Disagreement] = []

    def fn(key: str, name: str) -> str:
        return f"{funcs[key]} {name}" if key in funcs else name

    raised = engine_error(a)
    ours = static_load_errors(ctx)
    if raised and not ours:
        out.append(Disagreement("whether the draft builds and loads",
                                "no error that stops the load", f"{raised[0]} raises {raised[1]}",
                                fn({"get_config": "get_config", "SpeculativeConfig": "SpeculativeConfig",
                                    "initialize_model": "initialize_model",
                                    "load_weights": "initialize_model"}[raised[0]], raised[0])))
    if ours and not raised:
        out.append(Disagreement("whether the draft builds and loads", "; ".join(ours),
                                f"built {(a.get('model') or {}).get('class')} and loaded every tensor",
                                fn("initialize_model", "initialize_model + load_weights")))
    if raised or ours:
        return out  # nothing past a refusal is comparable

    m = a.get("model") or {}
    t = ctx.target
    # the ids the runner feeds: its function's answer, else the target's defaults (set_aux_hidden_state_layers
    # collects sorted(set(ids)))
    no_aux = m.get("fc_weight_shape") is None and m.get("use_aux_hidden_state") is False
    if t is not None and not no_aux and runner in a:
        got = a.get(runner)
        fed = sorted(set(got if isinstance(got, list) and got else (a.get("default") or [])))
        static = fed_physical_ids(ctx)
        mine = sorted(set(static if static is not None else ctx.engine.default_physical_ids(t.num_hidden_layers)))
        if fed != mine:
            out.append(Disagreement(f"the streams {ctx.engine.runner_label or 'the runner'} feeds", mine, fed,
                                    fn(runner, "get_eagle3_aux_layers_from_config (else the target's defaults)")))
    # fc: how many aux states the draft class sizes it for
    fc = m.get("fc_weight_shape")
    if fc:
        th = ctx.draft.config.get("target_hidden_size") or (t.hidden_size if t is not None else None)
        n_engine = m.get("num_aux_hidden_states") or (fc[1] // th if th else None)
        n_mine = built_aux_count(ctx)
        if n_engine is not None and n_engine != n_mine:
            out.append(Disagreement("the aux states fc is built for", n_mine, n_engine,
                                    fn("initialize_model", "initialize_model (the draft class's fc)")))
    # the context served next to this target
    s = a.get("served") or {}
    if t is not None and s.get("target_max_model_len"):
        t_len = s["target_max_model_len"]
        pos, served, _ = vllm_positions(ctx.engine, ctx.draft.config, ctx.draft.max_position_embeddings, t_len)
        eng_served = s.get(f"{runner}_max_model_len", t_len)
        if (pos, served) != (s.get("draft_max_position_embeddings"), eng_served):
            out.append(Disagreement("the draft's positions and the context served",
                                    f"positions {pos}, serves {served}",
                                    f"positions {s.get('draft_max_position_embeddings')}, serves {eng_served}",
                                    fn("limit_max_model_len_to_draft", "_limit_max_model_len_to_draft")
                                    if "limit_max_model_len_to_draft" in funcs else
                                    fn("draft_max_position_embeddings",
                                       "_maybe_override_draft_max_position_embeddings")))
        if t.max_position_embeddings is not None and t.max_position_embeddings != t_len:
            out.append(Disagreement("the target's context", t.max_position_embeddings, t_len,
                                    fn("ModelConfig", "ModelConfig (max_model_len)")))
    # the weights the draft class skips
    if "dropped" in m:
        canon = {raw: c for c, raw in ctx.draft.raw_names.items()}
        dropped = sorted({canon.get(n, n) for n in m["dropped"]})
        mine = sorted(c for c in ctx.engine.ignored_tensors if c in ctx.draft.raw_names)
        if dropped != mine:
            out.append(Disagreement("the tensors the draft class skips", mine, dropped,
                                    fn("initialize_model", "the draft class's load_weights")))
    return out
