"""The command line's path options, enumerated from its own parameter definitions, and what each is tried with
(issue #45): shared by tests/test_path_options.py (every kind of path in every option) and
tests/test_file_option_memory.py (endless streams in every input option).

`path_options()` reads the click command tree typer builds (`kconvert.cli._built(None)`) and keeps each parameter
whose declaration says it takes a path (`kconvert.cli._common.path`): a new option declared so is tried without an
edit here. The base invocations below are per command (the option under test replaces its value, or is added);
they run engine-free in a fraction of a second.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

# Options that take a path today, as a user knows them from `kconvert <command> --help`: the enumeration must find
# every one (a declaration lost in a refactor would drop an option from the guard and from the test unnoticed).
KNOWN = {
    ("acceptance", "metrics"), ("acceptance", "--before"),
    ("fix", "source"), ("fix", "--output"), ("fix", "--target"), ("fix", "--lm-head-from"),
    ("fix", "--decided-by"), ("fix", "--config"),
    ("inspect", "source"), ("inspect", "--target"), ("inspect", "--config"), ("inspect", "--report"),
    ("inspect", "--sarif"),
    ("matrix", "drafts"), ("matrix", "--from"), ("matrix", "--target"), ("matrix", "--trace"), ("matrix", "--prompts"),
    ("matrix", "--cache"), ("matrix", "--config"), ("matrix", "--csv"), ("matrix", "--html"), ("matrix", "--report"),
    ("matrix", "--markdown"),
    ("push", "folder"), ("push", "--report"), ("push-trace", "folder"),
    ("score", "draft"), ("score", "--trace"), ("score", "--target"), ("score", "--lm-head-from"), ("score", "--config"),
    ("score", "--report"),
    ("trace", "target"), ("trace", "--output"), ("trace", "--prompts"), ("trace", "--continuations"),
    ("trace", "--from-dump"), ("trace", "--for-drafts"),
    ("verify", "draft"), ("verify", "--target"), ("verify", "--prompts"), ("verify", "--policy"),
    ("verify", "--config"),
    ("verify", "--report"), ("verify", "--junit"), ("verify", "--markdown"), ("verify", "--sarif"),
}


@dataclass(frozen=True)
class PathOption:
    command: str
    flag: str  # the option's first spelling, or the argument's name
    role: str  # kconvert.cli._common: input, output-file, output-folder, cache
    argument: int | None  # the position among the command's arguments (None: an option)
    force: bool = False  # the command takes --force (what it replaces is tried with it too)

    @property
    def id(self) -> str:
        return f"{self.command} {self.flag}"


def path_options() -> list[PathOption]:
    from kconvert.cli import _built, _register
    from kconvert.cli._common import path_role

    _register()
    out = []
    for name, cmd in sorted(_built(None).commands.items()):
        args = [p for p in cmd.params if type(p).__name__.endswith("Argument")]
        force = any("--force" in (getattr(p, "opts", None) or []) for p in cmd.params)
        for p in cmd.params:
            role = path_role(p)
            if role is None:
                continue
            if p in args:
                out.append(PathOption(name, p.name, role, args.index(p), force))
            else:
                out.append(PathOption(name, p.opts[0], role, None, force))
    return out


# ------------------------------------------------------------------------------------------------ fixtures ---

SCRAPE = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 100.0
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 300.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 150.0
"""


def build_inputs(root: Path) -> dict[str, Path]:
    """Every input the base invocations read, under `root` (made once, copied for each option)."""
    import numpy as np

    from tests.factories import make_draft, make_target
    from tests.score_factories import random_trace
    from tests.test_push import make_checkpoint, make_report, write_report
    from tests.writer_factories import write_safetensors

    root.mkdir(parents=True)
    f = {
        "draft": make_draft(root / "draft", "specforge"),  # K404 on vLLM 0.32/v1: fix has ops to write
        "draft_t": make_draft(root / "draft-t", "torchspec"),  # a llama draft score reads
        "full": make_draft(root / "full", "torchspec", full_vocab=True),
        "target": make_target(root / "target", "tiny"),
        "trace": random_trace(root / "trace", seqs=((4, 6), (4, 6))),  # two: a diagnosis's standard error is finite
        "pushed": make_checkpoint(root / "pushed"),
    }
    f["verify_report"] = write_report(root / "verify.json", make_report(f["pushed"]))
    f["prompts"] = root / "prompts.jsonl"
    f["prompts"].write_text("".join(json.dumps({"prompt": f"What is {i} + {i}?"}) + "\n" for i in range(3)))
    f["policy"] = root / "policy.toml"
    f["policy"].write_text('[[gate]]\nmin_acceptance_length = 1.0\n')
    f["config"] = root / "kconvert.toml"
    f["config"].write_text('fail-on = "error"\n')
    f["list"] = root / "drafts.txt"
    f["list"].write_text(f"{f['draft']}\n")
    f["metrics"] = root / "metrics.txt"
    f["metrics"].write_text(SCRAPE)
    f["continuations"] = root / "continuations.jsonl"
    f["continuations"].write_text(json.dumps({"prompt_token_ids": [1, 2, 3], "output_token_ids": [4, 5]}) + "\n")
    # a target with its embedding rows and a speculators dump of three streams for it (trace --from-dump)
    H, V, L = 8, 32, 8
    dt = root / "dump-target"
    dt.mkdir()
    (dt / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": L, "hidden_size": H,
        "vocab_size": V, "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 16,
        "torch_dtype": "float32"}))
    rng = np.random.default_rng(0)
    write_safetensors(dt / "model.safetensors", {
        "model.embed_tokens.weight": ("F32", (V, H), rng.standard_normal((V, H)).astype(np.float32))})
    f["dump_target"] = dt
    dump = root / "dump"
    for i in range(2):
        T = 6
        write_safetensors(dump / f"hs_{i}.safetensors", {
            "token_ids": ("I64", (T,), rng.integers(0, V, T).astype(np.int64)),
            "hidden_states": ("F32", (T, 3, H), rng.standard_normal((T, 3, H)).astype(np.float32))})
    f["dump"] = dump
    # a `score --diagnose` report of the draft fix reads (fix --decided-by), written by kconvert itself
    import contextlib
    import io

    from kconvert.cli import main

    f["report"] = root / "score.json"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main(["score", str(f["draft"]), "--trace", str(f["trace"]), "--diagnose", "--threads", "1",
              "--max-sequences", "1", "--report", str(f["report"])])
    assert f["report"].is_file()
    return f


# The base invocation of each command: "{name}" is an input above, "{new}" a fresh path in the scratch folder
# (where a base run's own outputs go). Positional arguments come first, in the command's order.
BASE = {
    "acceptance": ["acceptance", "{metrics}"],
    "fix": ["fix", "{draft}", "-o", "{new}", "--target", "{target}", "--engine-version", "0.32/v1"],
    "inspect": ["inspect", "{draft}", "--target", "{target}"],
    "matrix": ["matrix", "{draft}", "--target", "{target}", "--engines", "vllm:0.32", "--cache", "off"],
    "push": ["push", "{pushed}", "org/name", "--report", "{verify_report}", "--dry-run"],
    "push-trace": ["push-trace", "{trace}", "org/name", "--dry-run"],
    "score": ["score", "{draft_t}", "--trace", "{trace}", "--threads", "1", "--max-sequences", "1"],
    "trace": ["trace", "{target}", "--estimate", "--prompts", "{prompts}"],
    "verify": ["verify", "{draft}", "--target", "{target}", "--dry-run"],
}
# where an option only takes effect in another invocation of its command
OPTION_BASE = {
    ("trace", "--output"): ["trace", "{dump_target}", "--from-dump", "{dump}", "-o", "{new}", "--threads", "1"],
    ("trace", "--from-dump"): ["trace", "{dump_target}", "--from-dump", "{dump}", "-o", "{new}", "--threads", "1"],
    ("trace", "target"): ["trace", "{dump_target}", "--from-dump", "{dump}", "-o", "{new}", "--threads", "1"],
    ("score", "--lm-head-from"): ["score", "{draft_t}", "--trace", "{trace}", "--threads", "1", "--max-sequences",
                                  "1", "--diagnose"],
}
# the input an option reads when it is given what it expects (the "valid" kind); an option not named here is given
# the command's first input
VALID = {
    "--target": "target", "--config": "config", "--policy": "policy", "--prompts": "prompts", "--from": "list",
    "--trace": "trace", "--lm-head-from": "full", "--decided-by": "report", "--continuations": "continuations",
    "--from-dump": "dump", "--for-drafts": "draft", "--before": "metrics", "metrics": "metrics",
    ("push", "--report"): "verify_report", ("push", "folder"): "pushed", ("push-trace", "folder"): "trace",
    ("trace", "target"): "dump_target", ("score", "draft"): "draft_t",
}


def valid_input(opt: PathOption) -> str:
    return VALID.get((opt.command, opt.flag)) or VALID.get(opt.flag) or "draft"


def base_argv(opt: PathOption) -> list[str]:
    return list(OPTION_BASE.get((opt.command, opt.flag), BASE[opt.command]))


def primary_input(opt: PathOption, inputs: dict[str, Path]) -> Path:
    """The command's first argument in its base invocation: the input a destination is put equal to, inside or
    above."""
    first = base_argv(opt)[1]
    return inputs[first.strip("{}")]


def argv_with(opt: PathOption, value: str, inputs: dict[str, Path], scratch: Path) -> list[str]:
    """The base invocation with `value` in the option under test."""
    argv = base_argv(opt)
    n_new = iter(range(1000))
    out = []
    for tok in argv:
        if tok == "{new}":
            out.append(str(scratch / f"out-{next(n_new)}"))
        elif tok.startswith("{") and tok.endswith("}"):
            out.append(str(inputs[tok[1:-1]]))
        else:
            out.append(tok)
    if opt.argument is not None:
        out[1 + opt.argument] = value
        return out
    flags = {opt.flag} | ({"-o"} if opt.flag == "--output" else set())
    for i, tok in enumerate(out):
        if tok in flags:
            out[i + 1] = value
            return out
    return out + [opt.flag, value]


def copy_inputs(template: dict[str, Path], src_root: Path, dst_root: Path) -> dict[str, Path]:
    shutil.copytree(src_root, dst_root, symlinks=True)
    return {k: dst_root / v.relative_to(src_root) for k, v in template.items()}


def private_char_device(path: Path, like: str = "/dev/null") -> None:
    """A character device node with `like`'s major and minor, made in a test's own folder (never a system path):
    mknod(2) needs CAP_MKNOD (root); the caller skips without it, and fails under CI=true."""
    os.mknod(path, 0o600 | 0o020000, os.stat(like).st_rdev)  # S_IFCHR


__all__ = ["BASE", "KNOWN", "OPTION_BASE", "PathOption", "argv_with", "build_inputs", "copy_inputs",
           "path_options", "primary_input", "private_char_device", "valid_input"]
