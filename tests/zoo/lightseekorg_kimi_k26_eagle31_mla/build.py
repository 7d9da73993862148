"""lightseekorg/kimi-k2.6-eagle3.1-mla: the EAGLE 3.1 variant of TorchSpec's Kimi MLA draft. sgl-project/sglang PR
#26506: "the same single-layer MLA layout as EAGLE3 with two extra optional config flags", `fc_norm` (a per-state
RMSNorm before fc, tensors `fc_norm.{i}.weight`) and `norm_output` (the post-norm hidden state fed to the next
step); `Eagle3DeepseekV2ForCausalLM` (NVIDIA-NeMo/Automodel PR #2322); ROCm/ATOM PR #943 reads `fc_norm`,
`norm_output`, `kv_lora_rank` and `eagle_config.eagle_aux_hidden_state_layer_ids` from its config. So: the MLA
replica beside it (tests/zoo/lightseekorg_kimi_k26_eagle3_mla) with both flags true and three fc_norm weights. Not
in the record: its ids (TorchSpec's export writes [2, 30, 58] for kimi_k2), vocabulary, rope."""
from __future__ import annotations

from pathlib import Path

from tests.zoo.lightseekorg_kimi_k26_eagle3_mla.build import config as mla_config
from tests.zoo.lightseekorg_kimi_k26_eagle3_mla.build import tensors as mla_tensors
from tests.zoo.replica import norm, write

TARGET = "kimi-k2.6"
H = 7168


def config() -> dict:
    return {**mla_config(), "fc_norm": True, "norm_output": True}


def tensors() -> dict:
    t = mla_tensors()
    for i in range(3):
        t[f"fc_norm.{i}.weight"] = norm("BF16", H, 20 + i)
    return t


def build(folder: Path) -> Path:
    return write(folder, config(), tensors(), shards=2, embed_std=0.02)
