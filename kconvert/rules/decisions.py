"""The user's decisions: what the files cannot settle and a flag does (the layers the draft was trained on and the
convention of its ids, the reading of d2t, where a re-selected lm_head comes from, a cast, the target's rope, the
tensor-parallel size the draft will run at). Rules read them; `fix` applies and records them; the command lines
kconvert prints spell them back as flags (`Decisions.flags`)."""
from __future__ import annotations

from dataclasses import dataclass

from kconvert.engines.method_detection import Resolution
from kconvert.errors import UsageError

AUX_CONVENTIONS = ("input", "output")
D2T_KINDS = ("offsets", "absolute")


@dataclass
class Decisions:
    """Decisions the files cannot settle (fix flags; also honoured by inspect and verify)."""

    aux_ids: list[int] | None = None  # physical ids wanted, in vLLM's input-of-layer convention
    aux_ids_default: bool = False  # accept the engine's default layers
    aux_convention: str | None = None  # convention the written ids follow: input|output
    d2t_kind: str | None = None  # offsets|absolute
    lm_head_source: str | None = None
    cast_dtype: str | None = None  # BF16|F16|F32
    rope_from_target: bool = False  # copy the target's rope scaling into a draft that has none
    tp: int | None = None  # tensor-parallel size the target will run at (K304 checks the split)
    draft_tp: int | None = None  # draft_tensor_parallel_size (None: the target's TP)
    # a replayed production line's speculative_config: the method it names or the engine detects (K109)
    served: Resolution | None = None

    def flags(self) -> list[str]:
        """The flags that state the decisions about what the draft means (aux ids, their convention, d2t), as a
        command line kconvert prints must repeat them."""
        flags: list[str] = []
        if self.aux_ids_default:
            flags += ["--aux-ids", "default"]
        elif self.aux_ids:
            flags += ["--aux-ids", ",".join(str(i) for i in self.aux_ids)]
        if self.aux_convention:
            flags += ["--aux-convention", self.aux_convention]
        if self.d2t_kind:
            flags += ["--d2t", self.d2t_kind]
        return flags


# The library API's earlier name for the decisions: `kconvert.Options` and the `options=` keyword still take them.
Options = Decisions


def given(decisions: Decisions | None, options: Decisions | None) -> Decisions | None:
    """The decisions a library call received, under their name or the earlier one (`options=`)."""
    if decisions is not None and options is not None:
        raise UsageError("pass the decisions once: decisions= or its earlier name options=, not both")
    return decisions if decisions is not None else options


def parse_aux_ids(value: str | None) -> tuple[list[int] | None, bool]:
    """`--aux-ids`: comma-separated layer numbers, or `default`; returns (ids, default)."""
    if value is None:
        return None, False
    if value.strip().lower() == "default":
        return None, True
    try:
        ids = [int(x) for x in value.replace(" ", "").split(",") if x != ""]
    except ValueError:
        raise UsageError(f"--aux-ids {value!r}: give comma-separated layer numbers, e.g. 2,30,58, or 'default'") from None
    if not ids or any(i < 0 for i in ids):
        raise UsageError(f"--aux-ids {value!r}: give non-negative layer numbers")
    return ids, False


def parse_layers(value: str | None) -> list[int] | str | None:
    """`trace --layers`: comma-separated layer numbers (input-of-layer numbering), or `all`."""
    if value is None:
        return None
    if value.strip().lower() == "all":
        return "all"
    try:
        out = [int(x) for x in value.replace(" ", "").split(",") if x != ""]
    except ValueError:
        raise UsageError(f"--layers {value!r}: comma-separated layer numbers (vLLM's input-of-layer numbering), "
                         "or all") from None
    if not out or any(i < 0 for i in out):
        raise UsageError(f"--layers {value!r}: give non-negative layer numbers")
    return out


def decisions_from_flags(aux_ids: str | None, aux_convention: str | None, d2t: str | None, **kw: object) -> Decisions:
    """The decisions as the command line gives them (`--aux-ids`, `--aux-convention`, `--d2t`, and `kw` as they
    are); a value no flag accepts is a UsageError."""
    ids, default = parse_aux_ids(aux_ids)
    if aux_convention not in (None, *AUX_CONVENTIONS):
        raise UsageError(f"--aux-convention {aux_convention!r}: choose input or output")
    if d2t not in (None, *D2T_KINDS):
        raise UsageError(f"--d2t {d2t!r}: choose offsets or absolute")
    return Decisions(aux_ids=ids, aux_ids_default=default, aux_convention=aux_convention, d2t_kind=d2t,
                     **kw)  # type: ignore[arg-type]


__all__ = ["Decisions", "Options", "decisions_from_flags", "given", "parse_aux_ids"]
