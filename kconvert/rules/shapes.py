"""Shapes: the fc's input width and the hidden size the draft's tensors imply."""
from __future__ import annotations

import json
from typing import Any, Iterator

from kconvert.rules.base import Context, Evidence, Finding, FixAvailability, rule
from kconvert.writer.ops import SetConfig


def _engine_aux_count(ctx: Context) -> int:
    cfg = ctx.draft.config
    n = cfg.get("num_aux_hidden_states")
    if isinstance(n, int) and ctx.engine.engine == "vllm":
        return n
    ec = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    ids = ec.get("eagle_aux_hidden_state_layer_ids")
    if isinstance(ids, list) and ids:
        return len(ids)
    if ctx.draft.is_speculators and isinstance(cfg.get("eagle_aux_hidden_state_layer_ids"), list):
        # vLLM's speculators adapter copies the top-level ids where the runner reads them.
        return len(cfg["eagle_aux_hidden_state_layer_ids"])
    return 3


def built_aux_count(ctx: Context) -> int:
    """How many aux states vLLM's draft class sizes fc for: num_aux_hidden_states, else the length of
    eagle_config's ids, else 3 (0.32-0.34 model_executor/models/llama_eagle3.py; the MLA and Qwen3 classes the
    same), read from the config vLLM builds the class from: a speculators draft's transformer_layer_config, to which
    the speculators adapter adds the ids at the top level only (configs/speculators/algos.py update_eagle3), so
    they do not size fc there. What loads; `_engine_aux_count` is what the runner feeds."""
    cfg = ctx.draft.config
    if ctx.draft.is_speculators:
        cfg = cfg.get("transformer_layer_config") if isinstance(cfg.get("transformer_layer_config"), dict) else {}
    n = cfg.get("num_aux_hidden_states")
    if isinstance(n, int) and not isinstance(n, bool):
        return n
    ec = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    ids = ec.get("eagle_aux_hidden_state_layer_ids")
    return len(ids) if isinstance(ids, list) and ids else 3


def _fed_count(ctx: Context) -> int | None:
    """How many aux states this vLLM row's runner feeds the draft (the streams it collects for the ids it reads, or
    its defaults), where kconvert knows; None elsewhere."""
    if ctx.engine.engine != "vllm" or ctx.target is None or ctx.draft.aux.ids is None:
        return None
    from kconvert.rules.aux_layers import fed_physical_ids

    fed = fed_physical_ids(ctx)
    return len(set(fed)) if fed else None


@rule("K301", "error",
      fix_availability=FixAvailability.NEEDS_DECISION,
      summary="`fc` does not take (number of aux states) x (target hidden size) inputs as the config implies.",
      why="The engine sizes fc as target_hidden_size (default: hidden_size) x the number of aux ids it reads "
          "(vLLM: num_aux_hidden_states, else len(eagle_config ids), else 3); a different width fails at load, "
          "and a width that matches another target's hidden size means the draft belongs to another target.",
      fix="fix sets target_hidden_size when the fc width and the target agree on it (safe); a draft trained for "
          "another target cannot be fixed. An fc width that disagrees with the number of aux states the engine "
          "feeds is an error whose repair is the ids themselves: fix refuses until --aux-ids names them.")
def fc_width(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    fc = d.shape("fc.weight")
    if not fc or len(fc) != 2:
        return
    n_aux = _engine_aux_count(ctx)
    declared_t = d.target_hidden_size or d.hidden_size
    if ctx.target is not None:
        th = ctx.target.hidden_size
        if fc[1] % th != 0:
            yield fc_width.finding(
                f"fc takes {fc[1]} inputs, not a multiple of the target hidden size {th}: trained for another target",
                evidence=[Evidence("fc.weight", list(fc), [d.effective_hidden, n_aux * th])])
            return
        if fc[1] != n_aux * th:
            yield fc_width.finding(
                f"fc takes {fc[1]} = {fc[1] // th} x {th} inputs but {ctx.engine.engine} will feed {n_aux} aux states",
                evidence=[Evidence("fc.weight", list(fc), [fc[0], n_aux * th])],
                needs_decision="--aux-ids (one id per aux state the draft was trained on)")
            return
        fed = _fed_count(ctx)
        if fed is not None and fed != n_aux:
            # fc is built for n_aux states (it loads) but the runner feeds another number: it fails when it runs
            # (V1 feeds eagle_config's 4 ids to an fc that num_aux_hidden_states 3 sized: vLLM 0.32/0.33's own
            # answers, tests/data/vllm_oracle.json probes/num-aux-3-ids-4)
            yield fc_width.finding(
                f"fc takes {fc[1]} = {n_aux} x {th} inputs but {ctx.engine.runner_name} feeds {fed} aux states",
                evidence=[Evidence("fc.weight", list(fc), [fc[0], fed * th])],
                needs_decision="--aux-ids (one id per aux state the draft was trained on)")
            return
        if declared_t != th:
            implied = (f"config implies target hidden size {declared_t}" if declared_t else
                       "config sets neither target_hidden_size nor hidden_size")
            yield fc_width.finding(
                f"{implied} but the target's is {th} (fc is {list(fc)})",
                evidence=[Evidence("target_hidden_size", d.target_hidden_size, th)],
                ops=[SetConfig(("target_hidden_size",), th, "fc width = n_aux x target hidden")])
    elif declared_t and fc[1] != n_aux * declared_t:
        yield fc_width.finding(
            f"fc takes {fc[1]} inputs but the config implies {n_aux} x {declared_t} = {n_aux * declared_t}",
            evidence=[Evidence("fc.weight", list(fc), [fc[0], n_aux * declared_t])])
    if d.hidden_size and fc[0] != d.hidden_size:
        yield fc_width.finding(f"fc has {fc[0]} outputs but hidden_size is {d.hidden_size}",
                               evidence=[Evidence("fc.weight", list(fc), [d.hidden_size, fc[1]])])


@rule("K303", "error",
      fix_availability=FixAvailability.SOMETIMES,
      summary="Tensors disagree with `hidden_size` (norms, MLP, lm_head columns).",
      why="The engine allocates every module from the config; a tensor of another width fails at load "
          "(weight_loader shape assertion) or, for norms, is broadcast wrongly.",
      fix="Not fixable: the config or the tensors belong to another model.")
def hidden_size(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    H = d.hidden_size
    if H is None or H <= 0:
        path = ctx.key_path("hidden_size")
        node: Any = d.checkpoint.config
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        integer = isinstance(node, int) and not isinstance(node, bool)
        if node is not None and d.tensors:
            # present but not an integer (a string "128", a float: the engine reads it as a number), or an integer
            # that is no width (0, negative: every module would be allocated empty or refused)
            yield hidden_size.finding(
                f"{'.'.join(path)} is {json.dumps(node)}, not " + ("a width" if integer else "an integer")
                + (f"; write {d.fc_out} (the fc layer's rows)" if d.fc_out else "; write the width as a number"),
                evidence=[Evidence(".".join(path), json.dumps(node), d.fc_out)],
                ops=[SetConfig(path, d.fc_out, "fc rows")] if d.fc_out else [])
        elif d.tensors:
            yield hidden_size.finding("config has no hidden_size", evidence=[Evidence("hidden_size", None, d.fc_out)],
                                      ops=[SetConfig(ctx.key_path("hidden_size"), d.fc_out, "fc rows")] if d.fc_out else [])
        return
    for n in ("norm.weight", "layers.0.input_layernorm.weight", "layers.0.hidden_norm.weight",
              "layers.0.post_attention_layernorm.weight"):
        s = d.shape(n)
        if s is not None and s != (H,):
            yield hidden_size.finding(f"{n} is {list(s)}, hidden_size is {H}", evidence=[Evidence(n, list(s), [H])])
    lm = d.shape("lm_head.weight")
    if lm is not None and (len(lm) != 2 or lm[1] != H):
        yield hidden_size.finding(f"lm_head.weight is {list(lm)}; expected [rows, {H}]",
                                  evidence=[Evidence("lm_head.weight", list(lm), ["draft_vocab", H])])
    up = d.shape("layers.0.mlp.up_proj.weight")
    if up is not None and d.intermediate_size and up != (d.intermediate_size, H):
        yield hidden_size.finding(f"mlp.up_proj is {list(up)}; config implies {[d.intermediate_size, H]}",
                                  evidence=[Evidence("layers.0.mlp.up_proj.weight", list(up),
                                                     [d.intermediate_size, H])])
