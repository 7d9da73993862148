"""`kconvert trace`."""
from __future__ import annotations

import re
from typing import Annotated, Optional

import typer
from rich.text import Text

from kconvert.cli._app import app
from kconvert.cli._common import COUNT, INPUT, OUTPUT_FOLDER, SECONDS, SMALL_COUNT, TOKENS_AHEAD, path
from kconvert.cli._help import help_examples
from kconvert.cli._output import console, emit_json, err_console, stage_progress
from kconvert.errors import UsageError
from kconvert.guard.text import visible


EXAMPLES = """
Examples:

  kconvert trace examples/tiny/target --prompts all -o tiny-trace --layers all --dtype float32

  kconvert trace meta-llama/Llama-3.1-8B-Instruct --prompts chat -o llama-trace --device cuda --aux-ids 2,16,29

  kconvert trace examples/tiny/target --engine vllm --prompts math --max-prompts 4 -o engine-trace \\
      --aux-ids 2,5,7

  kconvert trace moonshotai/Kimi-K2.5 --engine vllm --tp 8 --trust-remote-code \\
      --prompts all -o kimi-trace --aux-ids 2,30,58

  kconvert trace examples/tiny/target --continuations outputs.jsonl -o forced-trace

  kconvert trace ./target --from-dump ./speculators-hidden-states -o dump-trace --dump-aux-ids 2,30,58,61

  kconvert trace kimi-k2.5 --estimate --positions 20000

  kconvert trace examples/tiny/target --estimate --positions 2000 --for-drafts examples/tiny/drafts/mla-torchspec

  kconvert trace examples/tiny/target --max-prompts 4 --layers all --dtype float32 -o tiny-trace \
    --shard-size 200kB --push my-org/tiny-trace
"""

SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*(|B|kB|KB|MB|GB|TB|KiB|MiB|GiB|TiB)$")
UNITS = {"": 1, "B": 1, "kB": 10**3, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KiB": 2**10,
         "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def parse_size(text: str | None) -> int | None:
    """`--shard-size 5GB` (or 5000000000, 4GiB) in bytes; huggingface_hub's and transformers' spelling."""
    if text is None:
        return None
    m = SIZE.match(text.strip())
    if not m or float(m.group(1)) <= 0:
        from kconvert.errors import UsageError

        raise UsageError(f"--shard-size {text!r}: a size such as 5GB, 500MB or 4GiB")
    return int(float(m.group(1)) * UNITS[m.group(2)])



@app.command("trace", epilog=help_examples(EXAMPLES))
def trace_command(
    target: Annotated[str, path(INPUT, typer.Argument(help="The target model: a local folder or a Hub id "
                                                          "(safetensors weights; built into transformers, never "
                                                          "remote code).", show_default=False))],
    output: Annotated[Optional[str], path(OUTPUT_FOLDER, typer.Option(
        "--output", "-o", help="Trace folder to write: a new path, an empty folder, or (with --force) an earlier "
                               "trace; not with --estimate."))] = None,
    prompts: Annotated[str, path(INPUT, typer.Option(
        "--prompts", help="Prompt set: math, chat, code, all, or a .jsonl/.txt file."))] = "all",
    max_prompts: Annotated[Optional[int], typer.Option("--max-prompts", **COUNT,
                                                       help="Use only the first N prompts.")] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", **COUNT,
                                            help="Greedy tokens per prompt (as verify).")] = 64,
    engine: Annotated[str, typer.Option(
        "--engine", help="Who runs the target: hf (HF transformers, CPU or one GPU) or vllm (inside vLLM, as "
                         "verify runs it, through its extract_hidden_states method: the engine's own tokens and "
                         "states; needs the live extra: pip install 'kconvert-eagle3[live]').")] = "hf",
    tp: Annotated[int, typer.Option("--tp", "--tensor-parallel-size", **SMALL_COUNT,
                                    help="With --engine vllm: tensor parallel size (8 for Kimi-K2.5).")] = 1,
    trust_remote_code: Annotated[bool, typer.Option(
        "--trust-remote-code", help="With --engine vllm: let the engine run the target's remote code (Kimi-K2.5's "
                                    "tokenizer needs it); never on unless given.")] = False,
    engine_arg: Annotated[Optional[list[str]], typer.Option(
        "--engine-arg", help="With --engine vllm: any other engine argument, KEY=VALUE (repeatable), as verify "
                             "takes it.")] = None,
    timeout: Annotated[float, typer.Option("--timeout", **SECONDS,
                                           help="With --engine vllm: hard limit for the engine run, in seconds.")
                       ] = 1200.0,
    layers: Annotated[Optional[str], typer.Option(
        "--layers", help="Residual streams to record, vLLM's input-of-layer numbering (k = entering layer k), or "
                         "all. Default: the engines' default aux ids and --aux-ids, each ±1.")] = None,
    aux_ids: Annotated[Optional[str], typer.Option(
        "--aux-ids", help="Aux ids of the drafts you will score (recorded with their neighbours).")] = None,
    dtype: Annotated[str, typer.Option("--dtype", help="Compute dtype of the target: bfloat16 (as served), "
                                                       "float16 or float32.")] = "bfloat16",
    device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")] = "auto",
    threads: Annotated[Optional[int], typer.Option("--threads", **SMALL_COUNT, help="torch CPU threads.")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", **SMALL_COUNT, help="Sequences per forward.")] = 16,
    lookahead: Annotated[int, typer.Option("--lookahead", **TOKENS_AHEAD,
                                           help="Greedy tokens recorded past each output, so the last verify step "
                                                "can be checked (>= k).")] = 8,
    lm_head: Annotated[bool, typer.Option("--lm-head", help="Also store the target's lm_head (drafts without "
                                                            "their own share it).")] = False,
    continuations: Annotated[Optional[str], path(INPUT, typer.Option(
        "--continuations", help="Teacher-force these token ids instead of generating: a .jsonl of "
                                "{prompt_token_ids, output_token_ids} (e.g. an engine's outputs)."))] = None,
    from_dump: Annotated[Optional[str], path(INPUT, typer.Option(
        "--from-dump", help="Build the trace from an offline training dump of hidden states instead of running "
                            "the target's layers (see --format)."))] = None,
    dump_format: Annotated[str, typer.Option(
        "--format", help="Format of --from-dump: speculators (vLLM extract_hidden_states safetensors files: "
                         "token_ids [T], hidden_states [T, n, H]). SpecForge's torch.save dumps are not read.")
    ] = "speculators",
    dump_aux_ids: Annotated[Optional[str], typer.Option(
        "--dump-aux-ids", help="With --from-dump: the streams the dump's aux states are (input-of-layer "
                               "numbering; default: the engines' defaults (2, L//2, L-3), what SpecForge "
                               "captures).")] = None,
    for_drafts: Annotated[Optional[list[str]], path(INPUT, typer.Option(
        "--for-drafts", help="Record only the streams these drafts are fed (their aux ids as the engine reads "
                             "them; repeat or comma-separate): the same score, fewer bytes. --diagnose's shifted "
                             "readings then have no neighbours to try."))] = None,
    shard_size: Annotated[Optional[str], typer.Option(
        "--shard-size", help="Split trace.safetensors into shards of at most this size, whole tensors each "
                             "(e.g. 5GB): easier uploads and downloads, same bytes.")] = None,
    estimate: Annotated[bool, typer.Option(
        "--estimate", help="Print the bytes the trace will take, from the target's config alone (a profile such "
                           "as kimi-k2.5 works), and record nothing.")] = False,
    positions: Annotated[Optional[int], typer.Option(
        "--positions", **COUNT, help="With --estimate: total tokens (prompts + outputs + lookahead). Default: the "
                                   "prompts' outputs and lookahead, prompt tokens not counted.")] = None,
    push: Annotated[Optional[str], typer.Option(
        "--push", help="After recording, upload the trace as a Hub dataset repo org/name (created if "
                       "missing; HF_TOKEN), with a dataset card. An existing folder: `kconvert push-trace`.")
    ] = None,
    private: Annotated[bool, typer.Option("--private", help="With --push: create the dataset private.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing trace folder.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print trace.json (schemas/trace.schema.json) instead of a "
                                                         "summary; with --estimate the estimate "
                                                         "(schemas/trace-estimate.schema.json); a failure prints a "
                                                         "JSON error object (schemas/error.schema.json).")] = False,
) -> None:
    """Record what the target produces on a prompt set, once, so that drafts can be scored without it.

    Runs the target in HF transformers (CPU or GPU) or, with --engine vllm, inside vLLM as verify runs it,
    renders the prompts with its chat template as the live engine does, continues them greedily and stores, per
    position, the token, the target's greedy next token and the residual streams at the chosen layers, plus
    the target's embedding rows for the tokens used: safetensors and one JSON file
    (schemas/trace.schema.json), never a pickle. --estimate prints its size first (positions x layers x
    hidden x dtype, plus the embedding rows and --lm-head). Exit 0, 2 bad input, 3 the engine could not record.
    """
    from kconvert.rules.decisions import parse_aux_ids, parse_layers
    from kconvert.trace import DumpRequest, EstimateRequest, TraceRequest, trace

    lay, (ids, _), shard = parse_layers(layers), parse_aux_ids(aux_ids), parse_size(shard_size)
    _check_options(for_drafts=for_drafts, layers=layers, estimate=estimate, positions=positions, output=output,
                   push=push)
    if estimate:
        result = trace(EstimateRequest(target=target, layers=lay, aux_ids=ids, dtype=dtype, lm_head=lm_head,
                                       shard_size=shard, positions=positions, prompts=prompts,
                                       max_prompts=max_prompts, max_tokens=max_tokens, lookahead=lookahead,
                                       continuations=continuations), for_drafts=for_drafts)
        if as_json:
            emit_json(result.to_dict())
        else:
            _print_estimate(result.estimate, result.positions_from)
        raise typer.Exit(0)
    if from_dump:
        req = DumpRequest(target=target, dump=from_dump, out=output, format=dump_format,
                          aux_ids=parse_aux_ids(dump_aux_ids)[0], dtype=None, force=force, lm_head=lm_head,
                          threads=threads, device=device, shard_size=shard)
    else:
        from kconvert.runners.vllm_args import parse_engine_args  # deferred: --help loads no runner

        req = TraceRequest(target=target, out=output, prompts=prompts, max_prompts=max_prompts, max_tokens=max_tokens,
                           layers=lay, aux_ids=ids, dtype=dtype, device=device, lookahead=lookahead,
                           batch_size=batch_size, lm_head=lm_head, force=force, threads=threads, shard_size=shard,
                           tp=tp, engine_args=parse_engine_args(engine_arg), timeout_s=timeout, engine=engine,
                           trust_remote_code=trust_remote_code,
                           continuations_from=continuations)
    quiet = as_json or not err_console.is_terminal
    with stage_progress("trace", quiet) as progress:
        result = trace(req, for_drafts=for_drafts, progress=progress)
    pushed = _push(result.path, push, private, quiet) if push else None
    if as_json:
        emit_json(result.to_dict() | ({"push": pushed.to_dict()} if pushed else {}))
        raise typer.Exit(0)
    _print_written(result, pushed)
    raise typer.Exit(0)


def _check_options(*, for_drafts, layers, estimate: bool, positions, output, push) -> None:
    """The options that go together, refused before anything is read or recorded."""
    if for_drafts and layers:
        raise UsageError("--for-drafts chooses the layers: give it or --layers, not both")
    if estimate:
        return
    if positions is not None:
        raise UsageError("--positions goes with --estimate")
    if not output:
        raise UsageError("--output/-o: the trace folder to write is required (unless --estimate)")
    if push:
        from kconvert.trace.publish import check_repo_id

        check_repo_id(push)  # before the recording, not after it


def _print_written(result, pushed) -> None:
    from kconvert.hub.trace_card import data_bytes

    out, doc = result.path, result.meta
    files = doc["data"].get("files") or [doc["data"]]
    # paths, ids and notes are someone else's text: escaped (kconvert.guard.text), and Text, never markup
    console.print(Text.assemble(("wrote", "green"), visible(
        f" {out}: {doc['num_sequences']} sequences, {doc['num_positions']} positions, layers {doc['layers']}, "
        f"{doc['dtype']}, {data_bytes(doc) / 1e6:.1f} MB in {len(files)} file{'s' if len(files) > 1 else ''} "
        f"(format {doc['version']})")))
    ref = pushed.reference if pushed else str(out)
    if pushed:
        console.print(Text.assemble(("pushed", "green"), " ", visible(pushed.commit_url or pushed.repo_id)),
                      highlight=False)
    console.print(Text(visible(f"score drafts against it: kconvert score DRAFT --trace {ref}")), highlight=False)


def _print_estimate(est, how: str) -> None:
    from kconvert.trace.estimate import human_bytes

    b = est.tensor_bytes
    console.print(Text(visible(f"trace of {est.target} (hidden {est.hidden_size}, vocab {est.vocab_size}, "
                               f"{est.num_hidden_layers} layers), {est.dtype}")), highlight=False)
    console.print(f"  positions      {est.positions:>16,}  ({how})", highlight=False)
    console.print(f"  layers         {len(est.layers):>16}  {est.layers}", highlight=False)
    elem = {"bfloat16": 2, "float16": 2, "float32": 4}[est.dtype]
    console.print(f"  hidden states  {b['hidden']:>16,} bytes  {est.positions} x {len(est.layers)} x "
                  f"{est.hidden_size} x {elem}", highlight=False)
    console.print(f"  embedding rows {b['embed_tokens']:>16,} bytes  {est.unique_tokens} rows"
                  + (" at most" if est.unique_tokens_bound else ""), highlight=False)
    if est.lm_head:
        console.print(f"  lm_head        {b['lm_head']:>16,} bytes  vocab x hidden", highlight=False)
    console.print(f"  token indices  {b['index']:>16,} bytes  int64", highlight=False)
    console.print(f"  total          {est.total:>16,} bytes  ({human_bytes(est.total)}"
                  + (f", {est.shards} shards" if est.shards > 1 else "") + ")", highlight=False)
    console.print(f"  each further position adds {est.per_position:,} bytes", highlight=False)
    for note in est.notes:
        console.print(Text.assemble(("note:", "yellow"), " ", visible(note)), highlight=False)


def _push(out, repo_id: str, private: bool, quiet: bool):
    from kconvert.cli._output import byte_progress
    from kconvert.trace.publish import push_recorded

    with byte_progress("uploading", quiet=quiet) as progress:
        return push_recorded(out, repo_id, private=private,
                             on_upload=lambda done, total: progress(done, total, f"uploading to {repo_id}"))
