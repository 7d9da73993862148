"""`kconvert trace`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from kconvert.cli._app import app
from kconvert.cli._help import help_examples
from kconvert.cli._output import NoStatus, console, emit_json, err_console
from kconvert.errors import UsageError


EXAMPLES = """
Examples:

  kconvert trace examples/tiny/target --prompts all -o tiny-trace --layers all --dtype float32

  kconvert trace meta-llama/Llama-3.1-8B-Instruct --prompts chat -o llama-trace --device cuda --aux-ids 2,16,29

  kconvert trace examples/tiny/target --engine vllm --prompts math --max-prompts 4 -o engine-trace \\
      --aux-ids 2,5,7

  kconvert trace moonshotai/Kimi-K2.5 --engine vllm --tp 8 --engine-arg trust_remote_code=true \\
      --prompts all -o kimi-trace --aux-ids 2,30,58

  kconvert trace examples/tiny/target --continuations outputs.jsonl -o forced-trace

  kconvert trace ./target --from-dump ./speculators-hidden-states -o dump-trace --dump-aux-ids 2,30,58,61
"""

@app.command("trace", epilog=help_examples(EXAMPLES))
def trace_command(
    target: Annotated[str, typer.Argument(help="The target model: a local folder or a Hub id (safetensors "
                                               "weights; built into transformers, never remote code).",
                                          show_default=False)],
    output: Annotated[str, typer.Option("--output", "-o", help="Trace folder to write (must not exist unless "
                                                               "--force).")],
    prompts: Annotated[str, typer.Option("--prompts", help="Prompt set: math, chat, code, all, or a .jsonl/.txt "
                                                          "file.")] = "all",
    max_prompts: Annotated[Optional[int], typer.Option("--max-prompts", help="Use only the first N prompts.")] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Greedy tokens per prompt (as verify).")] = 64,
    engine: Annotated[str, typer.Option(
        "--engine", help="Who runs the target: hf (HF transformers, CPU or one GPU) or vllm (inside vLLM, as "
                         "verify runs it, through its extract_hidden_states method: the engine's own tokens and "
                         "states; needs kconvert[live]).")] = "hf",
    tp: Annotated[int, typer.Option("--tp", "--tensor-parallel-size", help="With --engine vllm: tensor parallel "
                                                                           "size (8 for Kimi-K2.5).")] = 1,
    engine_arg: Annotated[Optional[list[str]], typer.Option(
        "--engine-arg", help="With --engine vllm: any other engine argument, KEY=VALUE (repeatable), as verify "
                             "takes it.")] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="With --engine vllm: hard limit for the engine run, "
                                                             "in seconds.")] = 1200.0,
    layers: Annotated[Optional[str], typer.Option(
        "--layers", help="Residual streams to record, vLLM's input-of-layer numbering (k = entering layer k), or "
                         "all. Default: the engines' default aux ids and --aux-ids, each ±1.")] = None,
    aux_ids: Annotated[Optional[str], typer.Option(
        "--aux-ids", help="Aux ids of the drafts you will score (recorded with their neighbours).")] = None,
    dtype: Annotated[str, typer.Option("--dtype", help="Compute dtype of the target: bfloat16 (as served), "
                                                       "float16 or float32.")] = "bfloat16",
    device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")] = "auto",
    threads: Annotated[Optional[int], typer.Option("--threads", help="torch CPU threads.")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Sequences per forward.")] = 16,
    lookahead: Annotated[int, typer.Option("--lookahead", help="Greedy tokens recorded past each output, so the "
                                                               "last verify step can be checked (>= k).")] = 8,
    lm_head: Annotated[bool, typer.Option("--lm-head", help="Also store the target's lm_head (drafts without "
                                                            "their own share it).")] = False,
    continuations: Annotated[Optional[str], typer.Option(
        "--continuations", help="Teacher-force these token ids instead of generating: a .jsonl of "
                                "{prompt_token_ids, output_token_ids} (e.g. an engine's outputs).")] = None,
    from_dump: Annotated[Optional[str], typer.Option(
        "--from-dump", help="Build the trace from an offline training dump of hidden states instead of running "
                            "the target's layers (see --format).")] = None,
    dump_format: Annotated[str, typer.Option(
        "--format", help="Format of --from-dump: speculators (vLLM extract_hidden_states safetensors files: "
                         "token_ids [T], hidden_states [T, n, H]). SpecForge's torch.save dumps are not read.")
    ] = "speculators",
    dump_aux_ids: Annotated[Optional[str], typer.Option(
        "--dump-aux-ids", help="With --from-dump: the streams the dump's aux states are (input-of-layer "
                               "numbering; default: the engines' defaults (2, L//2, L-3), what SpecForge "
                               "captures).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing trace folder.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print trace.json instead of a summary.")] = False,
) -> None:
    """Record what the target produces on a prompt set, once, so that drafts can be scored without it.

    Runs the target in HF transformers (CPU or GPU) or, with --engine vllm, inside vLLM as verify runs it,
    renders the prompts with its chat template as the live engine does, continues them greedily and stores, per
    position, the token, the target's greedy next token and the residual streams at the chosen layers, plus
    the target's embedding rows for the tokens used: safetensors and one JSON file
    (schemas/trace.schema.json), never a pickle. Exit 0, 2 bad input, 3 the engine could not record.
    """
    from kconvert.rules.decisions import parse_aux_ids, parse_layers
    from kconvert.score import require_torch

    require_torch()
    lay = parse_layers(layers)
    ids, _ = parse_aux_ids(aux_ids)
    quiet = as_json or not err_console.is_terminal
    with err_console.status("trace", spinner="dots") if not quiet else NoStatus() as status:
        def progress(stage: str) -> None:
            if not quiet:
                status.update(f"trace: {stage}")
        if from_dump:
            from kconvert.score.dumps import DumpRequest, trace_from_dump

            dids, _ = parse_aux_ids(dump_aux_ids)
            out = trace_from_dump(DumpRequest(target=target, dump=from_dump, out=output, format=dump_format,
                                              aux_ids=dids, dtype=None, force=force, lm_head=lm_head,
                                              threads=threads, device=device), progress=progress)
        else:
            from kconvert.cli.verify_cmd import parse_engine_args
            from kconvert.score.record import TraceRequest, record_trace

            if engine not in ("hf", "vllm"):
                raise UsageError(f"--engine {engine!r}: choose hf or vllm")
            if engine == "hf" and (tp != 1 or engine_arg):
                raise UsageError("--tp and --engine-arg set up vLLM: give them with --engine vllm")
            req = TraceRequest(target=target, out=output, prompts=prompts, max_prompts=max_prompts,
                               max_tokens=max_tokens, layers=lay, aux_ids=ids, dtype=dtype, device=device,
                               lookahead=lookahead, batch_size=batch_size, lm_head=lm_head, force=force,
                               threads=threads, tp=tp, engine_args=parse_engine_args(engine_arg), timeout_s=timeout)
            if continuations:
                from kconvert.prompts import read_continuations

                req.continuations = read_continuations(continuations)
                req.continuations_from = continuations
            if engine == "vllm":
                from kconvert.score.engine_record import record_trace_vllm

                out = record_trace_vllm(req, progress=progress)
            else:
                out = record_trace(req, progress=progress)
    doc = json.loads((Path(out) / "trace.json").read_text())
    doc["target"].pop("config", None)
    if as_json:
        emit_json(doc)
        raise typer.Exit(0)
    console.print(f"[green]wrote[/] {escape(str(out))}: {doc['num_sequences']} sequences, {doc['num_positions']} "
                  f"positions, layers {doc['layers']}, {doc['dtype']}, {doc['data']['size'] / 1e6:.1f} MB "
                  f"(sha256 {doc['data']['sha256'][:16]})")
    console.print(f"score drafts against it: kconvert score DRAFT --trace {escape(str(out))}", highlight=False)
    raise typer.Exit(0)
