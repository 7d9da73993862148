"""Tensor names, required and unexpected tensors, shapes, embeddings and lm_head."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    import numpy as np

from kconvert.errors import KConvertError
from kconvert.source.checkpoint import read_rows
from kconvert.formats.layouts import NORMS, TOP_REQUIRED, layer_index, renames, required_layer_tensors
from kconvert.writer.ops import DropTensor, RenameTensor, SetConfig
from kconvert.rules.base import Context, Evidence, Finding, FixAvailability, rule


def draft_layers(d) -> tuple[int, list[str]]:
    """The decoder layers the draft really has (0..count-1) and the raw names of tensors past them.

    A layer after the first counts when the config declares it or when all its projections are there (a complete
    layer the config forgot: K103 corrects the count); anything else under `layers.N.` is a stray (K203).
    """
    q_lora = "layers.0.self_attn.q_a_proj.weight" in d.tensors or isinstance(d.config.get("q_lora_rank"), int)
    declared = d.num_hidden_layers if isinstance(d.num_hidden_layers, int) and d.num_hidden_layers >= 1 else 1
    count = 1 if d.decoder_layers[:1] == [0] else 0
    for i in d.decoder_layers[1:]:
        if i != count:
            break
        projections = [n for n in required_layer_tensors(d.layer_family, q_lora, layer=i) if n.endswith("_proj.weight")]
        if i < declared or all(n in d.tensors for n in projections):
            count += 1
        else:
            break
    strays = sorted(d.raw_names[c] for c in d.tensors if (li := layer_index(c)) is not None and li >= count)
    return count, strays


def embedding_sample_rows(n_rows: int) -> list[int]:
    """The embed_tokens rows K701 reads by byte range, unless the checkpoint names its own (`Checkpoint.row_sample`):
    16 rows drawn with a fixed seed, spread over the whole table."""
    import numpy as np  # deferred: ~40 ms to import; `kconvert --help` and `kconvert rules` never run a rule
    rng = np.random.default_rng(0)
    return sorted(set(rng.integers(0, n_rows, size=min(16, n_rows)).tolist()))


def no_aux_head(d) -> bool:
    """eagle_config.use_aux_hidden_state false and no fc: an EAGLE-3 head that reads only the last hidden state."""
    ec = d.config.get("eagle_config") if isinstance(d.config.get("eagle_config"), dict) else {}
    return ec.get("use_aux_hidden_state") is False and "fc.weight" not in d.tensors


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


@rule("K201", "key-layout", "tensor-names", "error",
      fix_availability=FixAvailability.ALWAYS,
      summary="Tensor names are written in a layout the engine version does not load as intended.",
      why="vLLM maps `midlayer.` to `layers.0.` and prefixes `model.` to every name but lm_head "
          "(llama_eagle3.py load_weights), so `model.`-prefixed names become `model.model.*` and do not match. "
          "SGLang's Llama draft held `midlayer` and silently skipped other names until PR #24663, which renamed "
          "it `layers.0` and kept loading `midlayer.*`; its DeepSeek/MLA draft renames `layers.0.` to "
          "`midlayer.` itself (deepseek_eagle3.py load_weights), so `layers.0.*` MLA drafts load there "
          "(lightseekorg/kimi-k2.5-eagle3-mla is served in SGLang's CI). SGLang 0.5.23's Llama draft also loads "
          "`model.`-prefixed names (llama_eagle3.py:372) while its MLA draft skips every one of them "
          "(kimi_k25_eagle3.py:449), as recorded from its own code run on CPU.",
      fix="fix renames every tensor into the engine's layout (headers only, bytes untouched; always safe).")
def key_layout(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    want = ctx.engine.layout
    # SGLang 0.5.23's Llama draft loads model.-prefixed names too (EngineRules.model_prefix_ok, recorded), but not
    # model.lm_head.weight (recorded as dropped)
    prefix_ok = (d.key_layout.prefix == "model." and not d.key_layout.lm_head_prefixed
                 and d.layer_family in ctx.engine.model_prefix_ok)
    bad_prefix = bool(d.key_layout.prefix) and not prefix_ok
    accepted = ctx.engine.layer_names.get(d.layer_family, (want.layer,))
    bad_layer = not d.key_layout.layer.startswith(accepted)
    if not (bad_prefix or bad_layer):
        return
    ops = [RenameTensor(old, new, f"{ctx.engine.engine} layout") for old, new in renames(d.raw_names, want)]
    # The evidence names a tensor that shows the layout: one with the prefix (lm_head is often the only one
    # without), else one under the layer name the engine does not load.
    shown = d.key_layout.prefix if bad_prefix else d.key_layout.layer
    raws = sorted(d.raw_names.values())
    example = next((n for n in raws if n.startswith(shown) and n != "model.lm_head.weight"),
                   next((n for n in raws if n.startswith(shown)), raws[0] if raws else ""))
    yield key_layout.finding(
        f"tensor names use the {d.key_layout.name}.* layout; {ctx.engine.engine} loads {want.name}.*",
        evidence=[Evidence(example, d.key_layout.name, want.name)], ops=ops)


@rule("K202", "missing-tensors", "tensor-names", "error",
      fix_availability=FixAvailability.NEVER,
      summary="Tensors the draft layer needs are missing.",
      why="vLLM does not detect missing weights: a missing Linear stays uninitialised memory and a missing norm "
          "stays 1 (vLLM 0.32 llama_eagle3.py/deepseek_eagle3.py load_weights; docs/formats-and-engines.md#vllm-032-loading-rules), so the draft loads and proposes garbage without a word.",
      fix="Not fixable: a missing weight cannot be invented. Re-export the draft from its training checkpoint.")
def missing_tensors(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    if not d.checkpoint.tensors:
        return
    q_lora = "layers.0.self_attn.q_a_proj.weight" in d.tensors or isinstance(d.config.get("q_lora_rank"), int)
    need = list(required_layer_tensors(d.layer_family, q_lora))
    for i in range(1, draft_layers(d)[0]):
        need += required_layer_tensors(d.layer_family, q_lora, layer=i)
    # A head without aux states has no fc (ModelOpt hf_spec_export.py: "fc and hidden_norm are only present
    # when use_aux_hidden_state=True"; vLLM PR #27688 drops fc. for it).
    need += [n for n in TOP_REQUIRED if not (n == "fc.weight" and no_aux_head(d))]
    missing = [n for n in need if n not in d.tensors and n not in NORMS]
    if missing:
        yield missing_tensors.finding(
            f"{len(missing)} required tensor(s) missing: {', '.join(missing[:6])}",
            evidence=[Evidence(n, "absent", "present") for n in missing])


@rule("K203", "unexpected-tensors", "tensor-names", "error",
      fix_availability=FixAvailability.ALWAYS,
      summary="Tensors that are not part of an EAGLE-3 draft are present.",
      why="vLLM raises on names it cannot place (AutoWeightsLoader) and silently ignores `*.bias`; extra "
          "decoder layers (`layers.1.*`) mean the checkpoint is not a one-layer EAGLE-3 draft.",
      fix="fix drops biases and stray tensors the engine would reject (safe for biases, which vLLM ignores "
          "anyway; other tensors are listed so that you can check they are not needed).")
def unexpected_tensors(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    strays = draft_layers(d)[1] if d.decoder_layers else []
    if not d.unmapped and not strays:
        return
    biases = [n for n in d.unmapped if n.endswith(".bias")]
    others = [n for n in d.unmapped if not n.endswith(".bias")] + strays
    if biases:
        yield unexpected_tensors.finding(
            f"{len(biases)} bias tensor(s) that the engine ignores: {', '.join(biases[:4])}", severity="warning",
            evidence=[Evidence(n, "present", "absent") for n in biases[:10]],
            ops=[DropTensor(n, "vLLM ignores *.bias silently") for n in biases])
    if others:
        yield unexpected_tensors.finding(
            f"{len(others)} tensor(s) the engine cannot place: {', '.join(others[:4])}",
            evidence=[Evidence(n, "present", "absent") for n in others[:10]],
            ops=[DropTensor(n, "not part of an EAGLE-3 draft") for n in others])


@rule("K301", "fc-width", "shapes", "error",
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


@rule("K302", "attention-shapes", "attention", "error",
      fix_availability=FixAvailability.SOMETIMES,
      summary="q/k/v/o projections do not match heads x head_dim (Llama layer) or the MLA ranks (MLA layer).",
      why="vLLM builds attention from the config: head_dim defaults to hidden/heads (7168/64 = 112), while Kimi "
          "drafts use 128, so a missing `head_dim` makes every projection the wrong shape and loading fails; "
          "MLA drafts need q_lora_rank, kv_lora_rank, qk_nope/rope_head_dim and v_head_dim that match the tensors.",
      fix="fix sets head_dim when the tensors determine it (q_proj rows / heads); other mismatches are not fixable.")
def attention_shapes(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    H = d.effective_hidden
    if d.layer_family in ("llama", "qwen3"):
        q = d.shape("layers.0.self_attn.q_proj.weight")
        k = d.shape("layers.0.self_attn.k_proj.weight")
        o = d.shape("layers.0.self_attn.o_proj.weight")
        heads = d.num_attention_heads
        if not q or not heads or not H:
            return
        hd_cfg = d.head_dim or H // heads
        if q[0] % heads:
            yield attention_shapes.finding(f"q_proj has {q[0]} rows, not a multiple of {heads} heads",
                                           evidence=[Evidence("layers.0.self_attn.q_proj.weight", list(q), None)])
            return
        hd = q[0] // heads
        if hd != hd_cfg:
            yield attention_shapes.finding(
                f"q_proj implies head_dim {hd} but the config gives {hd_cfg}"
                + ("" if d.head_dim else f" (hidden {H} / {heads} heads: head_dim is not set)"),
                evidence=[Evidence("head_dim", d.head_dim, hd)],
                ops=[SetConfig(ctx.key_path("head_dim"), hd, "q_proj rows / num_attention_heads")])
        if q[1] != 2 * H:
            yield attention_shapes.finding(
                f"q_proj takes {q[1]} inputs; an EAGLE-3 layer takes 2 x hidden = {2 * H}",
                evidence=[Evidence("layers.0.self_attn.q_proj.weight", list(q), [q[0], 2 * H])])
        kvh = d.num_key_value_heads or heads
        if k and k[0] != kvh * hd:
            yield attention_shapes.finding(
                f"k_proj has {k[0]} rows; {kvh} kv heads x head_dim {hd} = {kvh * hd}",
                evidence=[Evidence("num_key_value_heads", d.num_key_value_heads, k[0] // hd if hd else None)])
        if o and o != (H, heads * hd):
            yield attention_shapes.finding(f"o_proj is {list(o)}, expected {[H, heads * hd]}",
                                           evidence=[Evidence("layers.0.self_attn.o_proj.weight", list(o), [H, heads * hd])])
        if d.layer_family == "qwen3":
            # Qwen3Attention.q_norm/k_norm are RMSNorm(head_dim) (vLLM 0.32 qwen3.py): another length fails to load.
            for n in (f"layers.{i}.self_attn.{w}_norm.weight" for i in d.decoder_layers for w in "qk"):
                sh = d.shape(n)
                if sh is not None and sh != (hd,):
                    yield attention_shapes.finding(f"{n} is {list(sh)}; a Qwen3 layer's per-head norm is [{hd}]",
                                                   evidence=[Evidence(n, list(sh), [hd])])
        for i in d.decoder_layers[1:]:
            # vLLM PR #26164: only layer 0 concatenates the embeddings; later layers take H inputs.
            qi = d.shape(f"layers.{i}.self_attn.q_proj.weight")
            if qi and (len(qi) != 2 or qi[1] != H):
                yield attention_shapes.finding(
                    f"layers.{i}.self_attn.q_proj takes {qi[-1]} inputs; layers after the first take hidden = {H}",
                    evidence=[Evidence(f"layers.{i}.self_attn.q_proj.weight", list(qi), [qi[0], H])])
        return
    # MLA layer
    cfg = d.config
    need = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "num_attention_heads")
    miss = [k for k in need if not isinstance(cfg.get(k), int)]
    if miss:
        yield attention_shapes.finding(f"MLA draft config lacks {', '.join(miss)}",
                                       evidence=[Evidence(k, None, "an integer") for k in miss])
        return
    heads, kv, rope, nope, v = (cfg["num_attention_heads"], cfg["kv_lora_rank"], cfg["qk_rope_head_dim"],
                                cfg["qk_nope_head_dim"], cfg["v_head_dim"])
    ql = cfg.get("q_lora_rank")
    exp = {
        "layers.0.self_attn.kv_a_proj_with_mqa.weight": (kv + rope, 2 * H),
        "layers.0.self_attn.kv_b_proj.weight": (heads * (nope + v), kv),
        "layers.0.self_attn.o_proj.weight": (H, heads * v),
    }
    if isinstance(ql, int):
        exp["layers.0.self_attn.q_a_proj.weight"] = (ql, 2 * H)
        exp["layers.0.self_attn.q_b_proj.weight"] = (heads * (nope + rope), ql)
    else:
        exp["layers.0.self_attn.q_proj.weight"] = (heads * (nope + rope), 2 * H)
    bad = [(n, d.shape(n), e) for n, e in exp.items() if d.shape(n) is not None and tuple(d.shape(n)) != e]
    for n, got, e in bad:
        yield attention_shapes.finding(f"{n} is {list(got)}; the MLA config implies {list(e)}",
                                       evidence=[Evidence(n, list(got), list(e))])
    if ctx.target is not None and ctx.target.mla:
        tm = ctx.target.mla
        diff = [k for k in ("kv_lora_rank", "qk_rope_head_dim") if tm.get(k) is not None and cfg.get(k) != tm.get(k)]
        if diff:
            yield attention_shapes.finding(
                f"MLA cache dims differ from the target's ({', '.join(diff)}): the engine shares one MLA cache "
                "layout between target and draft", severity="warning",
                evidence=[Evidence(k, cfg.get(k), tm.get(k)) for k in diff])


@rule("K303", "hidden-size", "shapes", "error",
      fix_availability=FixAvailability.SOMETIMES,
      summary="Tensors disagree with `hidden_size` (norms, MLP, lm_head columns).",
      why="The engine allocates every module from the config; a tensor of another width fails at load "
          "(weight_loader shape assertion) or, for norms, is broadcast wrongly.",
      fix="Not fixable: the config or the tensors belong to another model.")
def hidden_size(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    H = d.hidden_size
    if not H:
        path = ctx.key_path("hidden_size")
        node: Any = d.checkpoint.config
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None and (isinstance(node, bool) or not isinstance(node, int)) and d.tensors:
            # present but not an integer (a string "128", a float): the engine reads it as a number
            yield hidden_size.finding(
                f"{'.'.join(path)} is {json.dumps(node)}, not an integer"
                + (f"; write {d.fc_out} (the fc layer's rows)" if d.fc_out else "; write the width as a number"),
                evidence=[Evidence(".".join(path), json.dumps(node), d.fc_out)],
                ops=[SetConfig(path, d.fc_out, "fc rows")] if d.fc_out else [])
        elif d.tensors:
            yield hidden_size.finding("config has no hidden_size", evidence=[Evidence("hidden_size", None, d.fc_out)],
                                      ops=[SetConfig(ctx.key_path("hidden_size"), d.fc_out, "fc rows")] if d.fc_out else [])
        return
    checks = {n: (lambda s: s[-1] == H) for n in ("norm.weight", "layers.0.input_layernorm.weight",
                                                   "layers.0.hidden_norm.weight",
                                                   "layers.0.post_attention_layernorm.weight")}
    for n in checks:
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
                                  evidence=[Evidence("intermediate_size", d.intermediate_size, up[0])])


@rule("K701", "embeddings", "embeddings", "error",
      fix_availability=FixAvailability.SOMETIMES,
      summary="`embed_tokens` is present but not shaped like the target's embedding, or looks untrained on an "
              "engine that uses it.",
      why="vLLM 0.32/0.33 keep a draft's own embed_tokens unless they equal the target's "
          "(llm_base_proposer._maybe_share_embeddings) and share the target's otherwise; SGLang replaces the "
          "draft's with the target's unconditionally (TorchSpec issue #38). A wrongly shaped one fails at load on "
          "both. A randomly initialised one (TorchSpec issue #38: convert_to_hf.py saved a fresh nn.Embedding "
          "until TorchSpec PR #39; lightseekorg/kimi-k2.5-eagle3 'did not work' in vLLM, vLLM PR #35966) loads "
          "silently on vLLM and acceptance collapses, while SGLang is unaffected. kconvert samples a few rows by "
          "byte range: nn.Embedding's N(0, 1) init has row std about 1, trained embeddings are far smaller.",
      fix="fix drops embed_tokens so that the engine shares the target's (safe when the draft's hidden size equals "
          "the target's, which EAGLE-3 drafts of Kimi/DeepSeek/Llama targets have; it is what SGLang does "
          "anyway).")
def embeddings(ctx: Context) -> Iterator[Finding]:
    import numpy as np  # deferred: ~40 ms to import; `kconvert --help` and `kconvert rules` never run a rule
    d = ctx.draft
    info = d.tensors.get("embed_tokens.weight")
    if info is None:
        return
    H = d.effective_hidden
    can_share = ctx.target is None or ctx.target.hidden_size == H
    drop = [DropTensor(d.raw_names["embed_tokens.weight"], "engine shares the target's embedding")] if can_share else []
    if ctx.target is not None and tuple(info.shape) != (ctx.target.vocab_size, H):
        yield embeddings.finding(
            f"embed_tokens is {list(info.shape)}; the target's vocabulary needs {[ctx.target.vocab_size, H]}",
            evidence=[Evidence("embed_tokens.weight", list(info.shape), [ctx.target.vocab_size, H])], ops=drop)
        return
    if len(info.shape) == 2 and info.shape[0] > 0 and info.dtype in ("BF16", "F16", "F32"):
        rows = (d.checkpoint.row_sample or embedding_sample_rows)(info.shape[0])
        try:
            sample = read_rows(d.checkpoint, info, rows)
        except KConvertError as e:
            ctx.unreadable.setdefault(info.name, e.message)
            return
        std = float(np.std(sample.astype(np.float64)))
        if 0.8 <= std <= 1.2 and ctx.engine.uses_draft_embeddings:
            yield embeddings.finding(
                f"embed_tokens rows have std {std:.2f}, like a fresh nn.Embedding (N(0,1)); trained embeddings "
                f"are far smaller: it was probably never trained (TorchSpec issue #38), and {ctx.engine.key} "
                "uses it instead of the target's", evidence=[Evidence("embed_tokens.weight", f"row std {std:.3f}",
                                                                       "<< 1")], ops=drop)


@rule("K801", "lm-head-missing", "lm-head", "error",
      fix_availability=FixAvailability.NEVER,
      summary="`lm_head` is missing.",
      why="Without lm_head the engine shares the target's; with a reduced draft vocabulary the shapes no longer "
          "agree and acceptance drops to 0 (sglang issue #27829).",
      fix="Not fixable: the draft's trained head cannot be invented.")
def lm_head_missing(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    if d.has_lm_head or not d.tensors:
        return
    vocab = ctx.target.vocab_size if ctx.target else d.vocab_size
    reduced = d.draft_vocab_size is not None and vocab is not None and d.draft_vocab_size != vocab
    yield lm_head_missing.finding(
        "lm_head is missing" + (f" while draft_vocab_size is {d.draft_vocab_size}: acceptance will be 0"
                                if reduced else ": the engine will use the target's head, not the trained one"),
        severity="error" if reduced else "warning",
        evidence=[Evidence("lm_head.weight", "absent", "present")])
