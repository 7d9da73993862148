"""kconvert/writer/ops.py: the fix operations as a user reads them (issue #30: its mutation run).

Two user-visible forms, checked against what is written down here, never against the module's output:
- `op_to_dict`: the JSON form in `kconvert.json` provenance, `fix --json` ("ops") and a finding's `fix_ops`
  (schemas/report.schema.json: each an object with a "kind"); it is `dataclasses.asdict` (Python docs: the fields
  in definition order, recursively) except that a config path, a tuple of keys, is one dotted string
  ("eagle_config.eagle_aux_hidden_state_layer_ids", the key path config.json nests);
- `describe`: the line `kconvert fix` prints per tensor op and `fix --json` lists as "steps"
  (kconvert/cli/fix_cmd.py, kconvert/results/fix.py); each line says what the op's docstring says it does:
  RewriteD2TOffsets stores d2t - arange (offsets, as vLLM/SGLang read d2t), RebuildT2D rebuilds the mask from d2t
  over the target vocabulary, ReselectLmHead takes full_lm_head[d2t + arange]; a config value is shown as Python's
  repr (Python docs: repr of str quotes it, of a list brackets it).
"""
from __future__ import annotations

import json

import pytest

from kconvert.writer.ops import (CastTensor, DeleteConfig, DropTensor, RebuildT2D, RenameTensor, ReselectLmHead,
                                 RewriteD2TOffsets, SetConfig, describe, op_to_dict)


def test_op_to_dict_joins_a_config_path_with_dots_and_keeps_every_field():
    op = SetConfig(("eagle_config", "eagle_aux_hidden_state_layer_ids"), [1, 29, 57], reason="K201")
    d = op_to_dict(op)
    assert d == {"path": "eagle_config.eagle_aux_hidden_state_layer_ids", "value": [1, 29, 57], "reason": "K201",
                 "kind": "set-config"}
    assert json.loads(json.dumps(d)) == d  # plain JSON
    assert op.path == ("eagle_config", "eagle_aux_hidden_state_layer_ids")  # the op itself is left as it was
    assert op_to_dict(DeleteConfig(("draft_vocab_size",))) == {"path": "draft_vocab_size", "reason": "",
                                                               "kind": "delete-config"}


def test_op_to_dict_of_tensor_ops_has_no_path():
    assert op_to_dict(RenameTensor("model.fc.weight", "fc.weight", "K301")) == {
        "old": "model.fc.weight", "new": "fc.weight", "reason": "K301", "kind": "rename-tensor"}
    assert op_to_dict(RebuildT2D(target_vocab_size=151936)) == {
        "name": "t2d", "d2t_name": "d2t", "target_vocab_size": 151936, "reason": "", "kind": "rebuild-t2d"}
    assert "path" not in op_to_dict(CastTensor("fc.weight", "BF16"))


@pytest.mark.parametrize("op, line", [
    (SetConfig(("eagle_config", "eagle_aux_hidden_state_layer_ids"), [1, 29, 57]),
     "config eagle_config.eagle_aux_hidden_state_layer_ids = [1, 29, 57]"),
    (SetConfig(("architectures",), "LlamaForCausalLMEagle3"), "config architectures = 'LlamaForCausalLMEagle3'"),
    (DeleteConfig(("eagle_config", "use_aux_hidden_state")), "config delete eagle_config.use_aux_hidden_state"),
    (RenameTensor("model.layers.0.mlp.up_proj.weight", "midlayer.mlp.up_proj.weight"),
     "rename model.layers.0.mlp.up_proj.weight -> midlayer.mlp.up_proj.weight"),
    (DropTensor("embed_tokens.weight"), "drop embed_tokens.weight"),
    (RewriteD2TOffsets(), "rewrite d2t: absolute target ids -> offsets"),
    (RebuildT2D(target_vocab_size=151936), "rebuild t2d from d2t over 151936 target ids"),
    (RebuildT2D(name="mask", d2t_name="ids", target_vocab_size=8), "rebuild mask from ids over 8 target ids"),
    (ReselectLmHead(source="/models/target"), "re-select lm_head.weight rows as /models/target:lm_head.weight[d2t + arange]"),
    (ReselectLmHead(name="head.w", source="t", source_tensor="model.lm_head.weight", d2t_name="ids"),
     "re-select head.w rows as t:model.lm_head.weight[ids + arange]"),
    (CastTensor("fc.weight", "BF16"), "cast fc.weight to BF16"),
])
def test_describe_says_what_the_op_does(op, line):
    assert describe(op) == line


def test_describe_refuses_what_is_not_an_op():
    with pytest.raises(TypeError) as e:
        describe("drop everything")  # type: ignore[arg-type]
    assert e.value.args == ("drop everything",)


# --- kconvert/writer/__init__.py: write_checkpoint, the byte mover imported when it is called -----------------------

def test_the_package_loads_the_writer_only_when_it_writes():
    """Importing `kconvert.writer` for its ops (as the rules do) must not import the byte mover; the package's
    `write_checkpoint` hands its arguments to `kconvert.writer.write.write_checkpoint` as given and returns its
    result. Checked in a fresh interpreter."""
    import subprocess
    import sys
    code = ("import sys, kconvert.writer, kconvert.writer.ops\n"
            "print('kconvert.writer.write' in sys.modules)\n"
            "import kconvert.writer.write as w\n"
            "calls = []\n"
            "w.write_checkpoint = lambda *a, **k: calls.append((a, k)) or 'written'\n"
            "print(kconvert.writer.write_checkpoint('ckpt', [], 'out', force=True), calls)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["False", "written [(('ckpt', [], 'out'), {'force': True})]"]


def test_an_unknown_name_of_the_package_is_pythons_own_attribute_error():
    """The message CPython gives for a module attribute it lacks: "module 'x' has no attribute 'y'"
    (Objects/moduleobject.c, module_getattro)."""
    import kconvert.writer
    with pytest.raises(AttributeError) as e:
        kconvert.writer.no_such_name  # noqa: B018
    assert str(e.value) == "module 'kconvert.writer' has no attribute 'no_such_name'"
    assert not hasattr(kconvert.writer, "Streamer")
