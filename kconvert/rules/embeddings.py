"""Embeddings: the draft's embedding table against the target's."""
from __future__ import annotations

from typing import Iterator

from kconvert.errors import KConvertError
from kconvert.rules.base import Context, Evidence, Finding, FixAvailability, rule
from kconvert.source.checkpoint import read_rows
from kconvert.writer.ops import DropTensor


def embedding_sample_rows(n_rows: int) -> list[int]:
    """The embed_tokens rows K701 reads by byte range, unless the checkpoint names its own (`Checkpoint.row_sample`):
    16 rows drawn with a fixed seed, spread over the whole table."""
    import numpy as np  # deferred: ~40 ms to import; `kconvert --help` and `kconvert rules` never run a rule
    rng = np.random.default_rng(0)
    return sorted(set(rng.integers(0, n_rows, size=min(16, n_rows)).tolist()))


@rule("K701", "error",
      fix_availability=FixAvailability.SOMETIMES,
      summary="`embed_tokens` is present but not shaped like the target's embedding, or looks untrained on an "
              "engine that uses it.",
      why="vLLM 0.32/0.33 keep a draft's own embed_tokens unless they equal the target's "
          "(llm_base_proposer._maybe_share_embeddings) and share the target's otherwise; SGLang replaces the "
          "draft's with the target's unconditionally (TorchSpec issue #38). A wrongly shaped one fails at load on "
          "both. A randomly initialised one (TorchSpec issue #38: convert_to_hf.py saved a fresh nn.Embedding "
          "until TorchSpec PR #39; lightseekorg/kimi-k2.5-eagle3 'did not work' in vLLM, vLLM PR #35966) loads "
          "silently on vLLM and acceptance collapses, while SGLang is unaffected. kconvert samples a few rows by "
          "byte range: nn.Embedding's N(0, 1) init has row std about 1, trained embeddings are far smaller: a "
          "sample std within [0.8, 1.2], both ends included, is taken for a fresh init.",
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
