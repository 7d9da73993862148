"""DraftModel: the one canonical description of an EAGLE-3 draft, whatever wrote it.

Every producer module under `kconvert.formats` reads a checkpoint into this; rules look only at it (and at
the target and engine), never at raw files. Tensor names are canonical: the vLLM layout without prefix
(`layers.0.self_attn.q_proj.weight`, `fc.weight`, `norm.weight`, `lm_head.weight`, `d2t`, `t2d`,
`embed_tokens.weight`); `raw_names` maps them back to the names in the files.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: `kconvert --help` builds --engine-version's help from the engine rows, which
    # name KeyLayout from here, and must not pay for the checkpoint readers (tests/test_startup_imports.py)
    from kconvert.source.checkpoint import Checkpoint
    from kconvert.source.safetensors_header import TensorInfo

@dataclass
class FormatGuess:
    producer: str
    confidence: float
    evidence: list[str] = field(default_factory=list)
    # A converter whose habits the files show (e.g. "speculators convert"): the draft was trained by someone else,
    # so the format's own id convention says nothing of how its ids were captured (rules.aux_layers).
    converted_by: str | None = None
    conversion_evidence: list[str] = field(default_factory=list)


def layer_index(name: str) -> int | None:
    """N of a canonical `layers.N.*` name."""
    if not name.startswith("layers."):
        return None
    head = name[len("layers."):].split(".", 1)[0]
    return int(head) if head.isdigit() and (head == "0" or not head.startswith("0")) else None


@dataclass
class KeyLayout:
    """How the tensor names are written: an optional outer prefix and the name of the decoder layer."""

    prefix: str = ""  # "" or "model."
    layer: str = "layers.0."  # "midlayer." or "layers.0."
    lm_head_prefixed: bool = False  # `model.lm_head.weight`

    @property
    def name(self) -> str:
        return f"{self.prefix}{self.layer.rstrip('.')}"


@dataclass
class ProducerLayers:
    """The target layers a producer trained a draft on, by its own record or code, where the draft's config names
    none: ids its run recorded outside the config (NeMo Automodel's config.yaml), or its default for an L-layer
    target (SpecForge's, Automodel's), in the convention its capture uses; neither when the record cannot be read."""

    ids: list[int] | None  # as the producer's record holds them
    default: Callable[[int], list[int]] | None  # the producer's choice for an L-layer target when none were named
    convention: str  # "output" | "input": what the ids (or the default) name
    evidence: str  # the file or code that says so, in full (the report's draft summary)
    source: str = ""  # the same in a few words, for a finding's message (default: the evidence)
    # The evidence is a file beside the draft folder that a copy of the folder leaves behind (a run's record): fix
    # then writes the ids into the config, so that its output still says which layers the draft was trained on.
    external: bool = False

    @property
    def said(self) -> str:
        return self.source or self.evidence

    def written(self, L: int | None) -> list[int] | None:
        """The ids in the producer's convention, for a target of L layers."""
        if self.ids is not None:
            return list(self.ids)
        return self.default(L) if self.default is not None and L else None

    def streams(self, L: int | None) -> list[int] | None:
        """The residual streams they name, in vLLM's input-of-layer numbering (output of layer i = stream i + 1)."""
        ids = self.written(L)
        if ids is None:
            return None
        return [i + 1 for i in ids] if self.convention == "output" else ids


@dataclass
class AuxIds:
    ids: list[int] | None  # as written
    source: str | None  # config path that held them, e.g. "eagle_config.eagle_aux_hidden_state_layer_ids"
    locations: dict[str, Any] = field(default_factory=dict)  # every path that holds ids -> value
    convention: str | None = None  # "input" (vLLM) | "output" (SGLang) | "recorded" (kconvert.json: recorded_streams) | None
    convention_evidence: str = ""
    # How much the convention above weighs (rules.aux_layers.settle_convention): "record" (kconvert.json),
    # "producer" (a producer recognised by its stamp or full signature, whose code fixes the convention), "weak"
    # (a producer guessed from the architecture alone, or a key only one engine reads), None.
    convention_strength: str | None = None
    # What the producer's record or code says about the layers when the config names none (kconvert.formats.<producer>
    # trained_layers); the rules weigh it (rules.aux_layers.producer_default_streams).
    producer_layers: ProducerLayers | None = None
    # The streams kconvert.json records for these very ids (convention "recorded": ids `kconvert fix` wrote in an
    # engine's own mixed numbering, tokenspeed's); None otherwise.
    recorded_streams: list[int] | None = None


@dataclass
class DraftModel:
    checkpoint: Checkpoint
    format: FormatGuess
    config: dict[str, Any]  # effective flat config (speculators: transformer_layer_config merged in)
    layer_family: str  # "llama" | "qwen3" | "mla"
    architectures: list[str]
    model_type: str | None
    is_speculators: bool
    key_layout: KeyLayout
    tensors: dict[str, TensorInfo]  # canonical name -> info
    raw_names: dict[str, str]  # canonical name -> name in the files
    unmapped: list[str]  # raw names that do not belong to an EAGLE-3 draft
    aux: AuxIds
    hidden_size: int | None
    target_hidden_size: int | None  # declared in config
    num_attention_heads: int | None
    num_key_value_heads: int | None
    head_dim: int | None  # declared
    intermediate_size: int | None
    num_hidden_layers: int | None
    vocab_size: int | None
    draft_vocab_size: int | None  # declared
    max_position_embeddings: int | None
    torch_dtype: str | None
    dtype: str | None
    norm_flags: dict[str, Any]
    rope: dict[str, Any]
    extra_flags: dict[str, Any] = field(default_factory=dict)
    # The speculative method the files are for (kconvert.formats.methods): "eagle3", or a method users mistake
    # for it ("dflash", "dspark", "peagle", "mtp"), and what said so.
    method: str = "eagle3"
    method_evidence: list[str] = field(default_factory=list)

    # --- facts derived from tensor shapes -------------------------------------------------------------
    def shape(self, name: str) -> tuple[int, ...] | None:
        t = self.tensors.get(name)
        return t.shape if t else None

    @property
    def fc_in(self) -> int | None:
        s = self.shape("fc.weight")
        return s[1] if s and len(s) == 2 else None

    @property
    def fc_out(self) -> int | None:
        s = self.shape("fc.weight")
        return s[0] if s and len(s) == 2 else None

    @property
    def lm_head_rows(self) -> int | None:
        s = self.shape("lm_head.weight")
        return s[0] if s else None

    @property
    def has_lm_head(self) -> bool:
        return "lm_head.weight" in self.tensors

    @property
    def decoder_layers(self) -> list[int]:
        """Indices N of the `layers.N.*` decoder layers present in the tensors (multi-layer drafts: 0..N-1)."""
        return sorted({i for n in self.tensors if (i := layer_index(n)) is not None})

    @property
    def has_embeddings(self) -> bool:
        return "embed_tokens.weight" in self.tensors

    @property
    def effective_hidden(self) -> int | None:
        return self.hidden_size or self.fc_out

    @property
    def tensor_dtypes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.tensors.values():
            if t.name.endswith(("d2t", "t2d")) or t.name in ("d2t", "t2d"):
                continue
            out[t.dtype] = out.get(t.dtype, 0) + 1
        return out

    def summary(self) -> dict[str, Any]:
        return {
            "layer_family": self.layer_family,
            "architectures": self.architectures,
            "model_type": self.model_type,
            "key_layout": self.key_layout.name,
            "hidden_size": self.hidden_size,
            "target_hidden_size": self.target_hidden_size,
            "fc_shape": list(self.shape("fc.weight") or []) or None,
            "num_aux_hidden_states": (len(self.aux.ids) if self.aux.ids else None),
            "aux_layer_ids": self.aux.ids,
            "aux_layer_ids_source": self.aux.source,
            "aux_convention": self.aux.convention,
            # where the config names none: what the producer's record or code says of the training layers
            "aux_layers_by_producer": ({"ids": self.aux.producer_layers.ids,
                                        "convention": self.aux.producer_layers.convention,
                                        "evidence": self.aux.producer_layers.evidence}
                                       if self.aux.producer_layers is not None and self.aux.ids is None else None),
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "num_hidden_layers": self.num_hidden_layers,
            "decoder_layers_present": len(self.decoder_layers),
            "vocab_size": self.vocab_size,
            "draft_vocab_size": self.draft_vocab_size,
            "lm_head_rows": self.lm_head_rows,
            "has_embeddings": self.has_embeddings,
            "has_d2t": "d2t" in self.tensors,
            "has_t2d": "t2d" in self.tensors,
            "max_position_embeddings": self.max_position_embeddings,
            "torch_dtype": self.torch_dtype,
            "dtype": self.dtype,
            "tensor_dtypes": self.tensor_dtypes,
            "norm_flags": self.norm_flags,
            "rope": self.rope,
            "num_tensors": len(self.tensors),
            "method": self.method,
        }
