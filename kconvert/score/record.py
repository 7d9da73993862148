"""`kconvert trace`: record a trace by running the target in HF transformers (CPU or one GPU).

The target is built from its own `config.json` by transformers' built-in classes (never remote code: a
model type transformers does not ship is refused) and its safetensors weights only (the loader is given a
folder that holds nothing else, so no pickle can be read). Wrappers such as Kimi-K2.5 keep their text model
under `text_config` and prefix its weights (`language_model.`): the text model is loaded on its own.

Prompts are rendered as the live engine renders them (kconvert.runners.vllm_worker: the tokenizer's chat
template with the generation prompt, encoded without special tokens) and continued greedily with a KV cache.
The residual streams are captured by hooks in the same forwards that produce each greedy token, so a trace
is self-consistent in any dtype: the recorded next token at position t is the argmax of the very forward
whose states are recorded at t. With `continuations` (token ids an engine produced, e.g. the outputs of a
live `verify`), those tokens are teacher-forced instead and the greedy lookahead continues after them.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kconvert._version import __version__
from kconvert.errors import InputError, MissingPackageError, UsageError
from kconvert.score.trace import HIDDEN_DTYPES, TraceMeta, TraceWriter
from kconvert.source.names import CONFIG_NAME, INDEX_NAME

# Model types whose weights transformers loads under another model type's classes (same architecture).
MODEL_TYPE_ALIASES = {"kimi_k2": "deepseek_v3"}
TOKEN_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
               "generation_config.json", "chat_template.jinja", "chat_template.json")


@dataclass
class TraceRequest:
    target: str
    out: str
    prompts: str = "all"
    max_prompts: int | None = None
    max_tokens: int = 64
    layers: list[int] | str | None = None  # None: defaults (aux ids ±1); "all": every stream 0..L
    aux_ids: list[int] | None = None  # centres of the default layers (besides the engine defaults)
    dtype: str = "bfloat16"
    device: str | None = None
    lookahead: int = 8
    batch_size: int = 16
    lm_head: bool = False
    chat_template: bool | None = None
    continuations: list[dict[str, Any]] | None = None  # [{"prompt_token_ids": [...], "output_token_ids": [...]}]
    continuations_from: str | None = None
    force: bool = False
    threads: int | None = None  # torch intra-op threads (1 is fastest on a few shared cores)
    shard_size: int | None = None  # bytes per trace.safetensors shard (None: one file)
    notes: list[str] = field(default_factory=list)
    # `--engine vllm` (kconvert.score.engine_record): the engine's tensor parallel size, further engine arguments
    # and environment, as `kconvert verify` takes them, and the hard limit of the run
    tp: int = 1
    engine_args: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 1200.0


def _torch():
    try:
        import torch
    except ModuleNotFoundError:
        raise MissingPackageError("kconvert trace", "torch", "trace") from None
    return torch


def default_layers(num_layers: int, aux_ids: list[int] | None) -> list[int]:
    """The aux ids ±1 (so shifted readings can be tried), around the engines' defaults and any ids given."""
    from kconvert.engines.expectations import EngineRules

    centres = set(EngineRules.default_physical_ids(num_layers)) | set(aux_ids or [])
    return sorted({i + s for i in centres for s in (-1, 0, 1) if 0 <= i + s <= num_layers})


# ------------------------------------------------------------------------------------------- the target ---

@dataclass
class LoadedTarget:
    model: Any
    tokenizer: Any
    config: dict[str, Any]  # the target's config.json as given
    text_config: dict[str, Any]
    root: Path
    weight_files: list[dict[str, Any]]
    eos_ids: list[int]
    source: str
    revision: str | None = None
    commit: str | None = None


def _resolve_folder(ref: str) -> tuple[Path, str | None, str | None]:
    p = Path(ref).expanduser()
    if p.is_dir():
        return p, None, None
    from kconvert.source.hub import is_hub_id, split_hub_id

    if not is_hub_id(ref):
        raise InputError(f"{ref}: not a folder or a Hub id")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    repo_id, revision = split_hub_id(ref)
    try:
        # safetensors, configs and tokenizer only: never a pickle, never code
        path = snapshot_download(repo_id, revision=revision, allow_patterns=["*.safetensors", "*.json",
                                                                           "tokenizer.model", "*.jinja"])
    except LocalEntryNotFoundError:
        raise InputError(f"{ref}: not in the Hugging Face cache and the Hub is not reachable") from None
    except (HfHubHTTPError, OSError) as e:
        raise InputError(f"{ref}: {e}") from None
    return Path(path), revision, Path(path).name


def load_target_model(ref: str, dtype: str, device: Any, *, need_tokenizer: bool = True) -> LoadedTarget:
    torch = _torch()
    try:
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    except ModuleNotFoundError:
        raise MissingPackageError("kconvert trace", "transformers", "trace") from None
    from kconvert.source.checkpoint import load_folder

    root, revision, commit = _resolve_folder(ref)
    ckpt = load_folder(root, ref=ref)  # validated file list, config and safetensors headers
    if not ckpt.tensors:
        raise InputError(f"{ref}: no safetensors weights (kconvert never loads pickled weights)")
    cfg = ckpt.config
    text = dict(cfg["text_config"]) if isinstance(cfg.get("text_config"), dict) else dict(cfg)
    mt = text.get("model_type")
    text["model_type"] = MODEL_TYPE_ALIASES.get(mt, mt)
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if text["model_type"] not in CONFIG_MAPPING:
        raise UsageError(f"{ref}: model type {mt!r} is not built into transformers {transformers.__version__}; "
                         "kconvert never runs a checkpoint's own code (record the trace where the target runs, "
                         "or from an offline dump with `kconvert trace --from-dump`)")
    names = list(ckpt.tensors)
    prefix = _weight_prefix(names)
    with tempfile.TemporaryDirectory(prefix="kconvert-trace-target-") as tmp:
        t = Path(tmp)
        (t / CONFIG_NAME).write_text(json.dumps(text))
        for rel in ckpt.safetensors_files:
            dst = t / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.symlink((root / rel).resolve(), dst)
        if ckpt.index is not None:
            os.symlink((root / INDEX_NAME).resolve(), t / INDEX_NAME)
        hf_cfg = AutoConfig.from_pretrained(str(t), trust_remote_code=False)
        kw: dict[str, Any] = {"config": hf_cfg, "dtype": getattr(torch, dtype), "trust_remote_code": False,
                              "use_safetensors": True}
        if prefix:
            kw["key_mapping"] = {"^" + prefix.replace(".", r"\."): ""}
        try:
            model = AutoModelForCausalLM.from_pretrained(str(t), **kw)
        except (OSError, ValueError, RuntimeError) as e:
            raise InputError(f"{ref}: transformers could not load the target: {str(e).splitlines()[0]}") from None
    model.eval().to(device)
    tok = None
    try:
        tok = AutoTokenizer.from_pretrained(str(root), trust_remote_code=False)
    except Exception as e:  # noqa: BLE001 - a tokenizer that needs code, or none at all
        if need_tokenizer:
            raise InputError(f"{ref}: the tokenizer cannot be loaded without running the checkpoint's code "
                             f"({type(e).__name__}); give token ids with --continuations") from None
    from kconvert.source import hashcache

    files = []
    for rel in ckpt.safetensors_files:
        p = root / rel
        files.append({"name": rel, "size": p.stat().st_size, "sha256": hashcache.lookup(p)})
    return LoadedTarget(model, tok, cfg, text, root, files, target_eos_ids(root, tok), ref, revision, commit)


def target_eos_ids(root: Path, tokenizer: Any) -> list[int]:
    """The tokens that end a greedy output: the tokenizer's EOS and generation_config.json's eos_token_id."""
    from kconvert.source.checkpoint import read_json_file

    eos: set[int] = set()
    if isinstance(getattr(tokenizer, "eos_token_id", None), int):
        eos.add(tokenizer.eos_token_id)
    gen = root / "generation_config.json"
    if gen.is_file():
        g = read_json_file(gen, "generation_config.json")
        e = g.get("eos_token_id") if isinstance(g, dict) else None
        eos.update([e] if isinstance(e, int) else [i for i in (e or []) if isinstance(i, int)])
    return sorted(eos)


def _weight_prefix(names: list[str]) -> str:
    for cand in ("", "language_model.", "model.language_model.", "text_model."):
        if f"{cand}model.embed_tokens.weight" in names:
            return cand
    for n in names:
        if n.endswith("model.embed_tokens.weight"):
            return n[: -len("model.embed_tokens.weight")]
    raise InputError("cannot find the text model's embed_tokens among the target's tensors")


def _decoder_layers(model: Any) -> list[Any]:
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise UsageError(f"{type(model).__name__}: no model.layers to hook (decoder-only causal LMs only)")
    return list(layers)


# ------------------------------------------------------------------------------------------- recording ---

class _Capture:
    """Forward hooks that keep the residual stream entering each recorded layer (and after the last one)."""

    def __init__(self, layers_mod: list[Any], wanted: list[int]):
        self.wanted = wanted
        self.out: dict[int, Any] = {}
        self.handles = []
        L = len(layers_mod)
        for k in wanted:
            if k < L:
                self.handles.append(layers_mod[k].register_forward_pre_hook(self._pre(k), with_kwargs=True))
            else:
                self.handles.append(layers_mod[L - 1].register_forward_hook(self._post(k)))

    def _pre(self, k: int):
        def hook(mod, args, kwargs):
            h = args[0] if args else kwargs["hidden_states"]
            self.out[k] = h.detach()
        return hook

    def _post(self, k: int):
        def hook(mod, args, output):
            h = output[0] if isinstance(output, tuple) else output
            self.out[k] = h.detach()
        return hook

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def render_prompts(tokenizer: Any, prompts: list[str], chat_template: bool | None) -> tuple[list[list[int]], bool]:
    from kconvert.runners.vllm_worker import _render_prompts

    try:
        return _render_prompts(tokenizer, prompts, chat_template)
    except ValueError as e:
        raise UsageError(str(e)) from None


def resolve_layers(req: TraceRequest, L: int) -> list[int]:
    """The streams to record: all 0..L, the ones given, or the defaults (aux ids ±1)."""
    if req.layers == "all":
        layers = list(range(L + 1))
    elif req.layers:
        layers = sorted(set(req.layers))
    else:
        layers = default_layers(L, req.aux_ids)
    bad = [k for k in layers if not 0 <= k <= L]
    if bad:
        raise UsageError(f"--layers {bad}: a {L}-layer target has streams 0..{L} (k = input of layer k)")
    return layers


def check_request(req: TraceRequest) -> None:
    if req.dtype not in HIDDEN_DTYPES:
        raise UsageError(f"--dtype {req.dtype!r}: choose bfloat16, float16 or float32")
    if req.lookahead < 0 or req.max_tokens < 1 or req.batch_size < 1:
        raise UsageError("--max-tokens and --batch-size must be positive, --lookahead not negative")


@dataclass
class PromptInputs:
    """The token ids to record from: rendered prompts (and given continuations), and the prompt set's record."""

    prompt_ids: list[list[int]]
    given: list[list[int]] | None
    prompt_set: dict[str, Any]


def prompt_inputs(req: TraceRequest, tokenizer: Any, V: int) -> PromptInputs:
    if req.continuations is not None:
        items = req.continuations
        set_name = Path(req.continuations_from).stem if req.continuations_from else "given"
        prompt_ids = [list(map(int, it["prompt_token_ids"])) for it in items]
        given = [list(map(int, it["output_token_ids"])) for it in items]
        applied = bool(items and items[0].get("chat_template_applied", False))
        digest = hashlib.sha256(json.dumps([prompt_ids, given]).encode()).hexdigest()
    else:
        from kconvert.prompts import load_prompts

        set_name, prompts = load_prompts(req.prompts)
        prompts = prompts[: req.max_prompts or None]
        prompt_ids, applied = render_prompts(tokenizer, prompts, req.chat_template)
        given = None
        digest = hashlib.sha256("\n".join(prompts).encode()).hexdigest()
    for seq in prompt_ids + (given or []):
        if any(not 0 <= i < V for i in seq):
            raise InputError(f"token ids outside the target vocabulary 0..{V - 1}")
    return PromptInputs(prompt_ids, given, {"name": set_name, "num_prompts": len(prompt_ids), "sha256": digest,
                                            "chat_template_applied": applied})


def record_trace(req: TraceRequest, progress: Callable[[str], None] | None = None) -> Path:
    """Record a trace folder in HF transformers; returns its path."""
    torch = _torch()
    import transformers

    from kconvert.score.run import resolve_device, set_threads

    say = progress or (lambda _s: None)
    check_request(req)
    device = resolve_device(req.device)
    set_threads(req.threads)
    t0 = time.perf_counter()
    say("loading the target")
    tgt = load_target_model(req.target, req.dtype, device, need_tokenizer=req.continuations is None)
    L, H, V = (int(tgt.text_config[k]) for k in ("num_hidden_layers", "hidden_size", "vocab_size"))
    layers = resolve_layers(req, L)
    inp = prompt_inputs(req, tgt.tokenizer, V)
    given = inp.given
    meta = TraceMeta(
        target={"source": tgt.source, "revision": tgt.revision, "commit": tgt.commit,
                "architectures": [a for a in tgt.config.get("architectures") or [] if isinstance(a, str)],
                "model_type": tgt.config.get("model_type"),
                "config_sha256": hashlib.sha256((tgt.root / CONFIG_NAME).read_bytes()).hexdigest(),
                "weights": tgt.weight_files, "config": tgt.config},
        dtype=req.dtype, layers=layers, hidden_size=H, vocab_size=V, num_hidden_layers=L, prompt_set=inp.prompt_set,
        continuation={"source": "given" if given is not None else "greedy",
                      "max_tokens": None if given is not None else req.max_tokens, "lookahead": req.lookahead,
                      "eos_token_ids": tgt.eos_ids, "from": req.continuations_from},
        recorder={"tool": "kconvert trace", "version": __version__, "backend": f"transformers {transformers.__version__}",
                  "torch": torch.__version__, "device": str(device)},
        notes=list(req.notes))
    with TraceWriter(req.out, meta, force=req.force, shard_size=req.shard_size) as writer:
        _record_sequences(torch, req, tgt, layers, inp, writer, device, say)
        emb = tgt.model.get_input_embeddings().weight.detach()
        head = None
        if req.lm_head:
            out_emb = tgt.model.get_output_embeddings()
            head = out_emb.weight.detach().cpu() if out_emb is not None else None
        meta.recorder["seconds"] = round(time.perf_counter() - t0, 3)
        return writer.finish(lambda ids: emb[torch.tensor(ids, device=emb.device)].cpu(), head)


def _record_sequences(torch, req: TraceRequest, tgt: LoadedTarget, layers: list[int], inp: PromptInputs,
                      writer: TraceWriter, device: Any, say: Callable[[str], None]) -> None:
    """Generate (or teacher-force) batch by batch, shortest prompts first, and add the sequences in prompt order."""
    prompt_ids, given = inp.prompt_ids, inp.given
    cap = _Capture(_decoder_layers(tgt.model), layers)
    try:
        order = sorted(range(len(prompt_ids)), key=lambda i: len(prompt_ids[i]))
        results: dict[int, tuple] = {}
        for s in range(0, len(order), req.batch_size):
            idx = order[s: s + req.batch_size]
            starts = [prompt_ids[i] + (given[i] if given is not None else []) for i in idx]
            # greedy: until EOS (inclusive) or max_tokens, then lookahead; given: lookahead only
            budgets = [req.lookahead if given is not None else req.max_tokens + req.lookahead for _ in idx]
            outs = _generate(torch, tgt.model, cap, starts, budgets, tgt.eos_ids,
                             req.max_tokens if given is None else None, req.lookahead, device)
            for j, i in enumerate(idx):
                results[i] = (len(prompt_ids[i]),) + outs[j]
            say(f"recorded {min(s + req.batch_size, len(order))}/{len(order)} sequences")
        for i in range(len(prompt_ids)):
            P, ids, nxt, hidden, out_len = results[i]
            writer.add_sequence(ids, nxt, P, len(given[i]) if given is not None else out_len, hidden)
    finally:
        cap.close()


def _generate(torch, model, cap: _Capture, starts: list[list[int]], budgets: list[int], eos: list[int],
              max_tokens: int | None, lookahead: int, device) -> list[tuple]:
    """Prefill `starts` (a left-padded batch) and decode greedily with a KV cache. Per sequence: (ids,
    next_token, hidden per layer [n, H] on CPU, output length). A greedy sequence stops emitting at EOS
    (inclusive) or max_tokens and is decoded `lookahead` tokens further; a given one only `lookahead`. The state
    recorded at every position comes from the forward that also produced the greedy token after it."""
    from transformers import DynamicCache

    B = len(starts)
    P = max(len(s) for s in starts)
    ids = torch.zeros((B, P), dtype=torch.long)
    mask = torch.zeros((B, P), dtype=torch.long)
    for b, s in enumerate(starts):
        ids[b, P - len(s):] = torch.tensor(s)
        mask[b, P - len(s):] = 1
    ids, mask = ids.to(device), mask.to(device)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    seq_ids = [list(s) for s in starts]
    nxt: list[list[int]] = [[] for _ in range(B)]
    hid: dict[int, list[list[Any]]] = {k: [[] for _ in range(B)] for k in cap.wanted}
    out_len: list[int | None] = [None] * B
    target_len = [len(s) + budgets[b] for b, s in enumerate(starts)]
    recorded = [0] * B
    cur_ids, cur_pos, first = ids, pos, True
    with torch.no_grad():
        while True:
            greedy = model(input_ids=cur_ids, attention_mask=mask, position_ids=cur_pos, past_key_values=cache,
                           use_cache=True).logits.argmax(-1)
            for b in range(B):
                if recorded[b] >= target_len[b]:
                    continue
                sl = slice(P - len(starts[b]), P) if first else slice(0, 1)
                labels = greedy[b, sl].tolist()
                nxt[b] += labels
                for k in cap.wanted:
                    hid[k][b].append(cap.out[k][b, sl].cpu())
                recorded[b] += len(labels)
            new = greedy[:, -1]
            for b in range(B):
                if len(seq_ids[b]) >= target_len[b]:
                    continue
                t = int(new[b])
                seq_ids[b].append(t)
                if max_tokens is not None and out_len[b] is None:
                    emitted = len(seq_ids[b]) - len(starts[b])
                    if t in eos or emitted >= max_tokens:
                        out_len[b] = emitted
                        target_len[b] = len(seq_ids[b]) + lookahead
            if all(recorded[b] >= target_len[b] for b in range(B)):
                break
            mask = torch.cat([mask, torch.ones((B, 1), dtype=mask.dtype, device=device)], 1)
            cur_ids, cur_pos, first = new[:, None], cur_pos[:, -1:] + 1, False
    out = []
    for b in range(B):
        n = target_len[b]
        hidden = {k: torch.cat(hid[k][b])[:n] for k in cap.wanted}
        ol = out_len[b] if out_len[b] is not None else n - len(starts[b]) - lookahead
        out.append((seq_ids[b][:n], nxt[b][:n], hidden, ol))
    return out
