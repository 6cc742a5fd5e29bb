"""Published training steps the model is held to (tests/python/test_training.py: dense rows within
10% or listed in :data:`KNOWN_MISSES` with their suspected cause; every row's error pinned),
each with its source and the assumptions where the source is silent, and the table of the
model against them."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ..._checks import choice
from ...fabrics import cluster
from .model import model
from .placement import domain_aware
from .precision import Precision
from .step import Parallelism, TrainingStep

__all__ = ["VALIDATION", "KNOWN_MISSES", "MOE_VALIDATION", "validation_step", "validate_training"]


#: Public step figures the model is held to (tests/python/test_training.py). Each gives what its
#: source publishes: ``reported_flop_per_s_per_gpu`` (model FLOP/s per GPU, BF16), or
#: ``reported_step_s``, or ``reported_tokens_per_s_per_gpu``; ``domain`` names the NVLink
#: domain of its GPUs (default HGX H100 on Quantum-2) and ``precision`` its recipe.
VALIDATION: dict[str, dict[str, Any]] = {
    "llama3-405b-16k": dict(
        source="https://arxiv.org/abs/2407.21783 (Llama 3, Table 4: 16,384 H100, TP 8, CP 1, PP 16, DP 128, "
               "seq 8,192, batch/DP 16, 16M tokens per batch, 400 TFLOP/s per GPU, BF16 MFU 41%)",
        model="llama3-405b", n_gpus=16384, reported_flop_per_s_per_gpu=400e12,
        parallelism=dict(tp=8, pp=16, dp=128, global_batch_size=2048, schedule="interleaved", virtual_stages=4,
                         dp_sharding="optim_grads", stage_layers=(7,) + (8,) * 14 + (7,)),
        assumptions="interleaved schedule with 4 virtual stages (the paper uses interleaving but gives no count) and "
                    "Megatron's micro-batch grouping (the paper's N = pp); first and last stage one layer fewer "
                    "(the paper's balancing); FSDP sharding optimizer state and fp32 gradients, weights kept whole "
                    "(section 3.3.2), so dp_sharding='optim_grads'; no activation recomputation (section 3.3.2); "
                    "micro-batch 1; TP communication exposed (no overlap stated). Memory: 78.1 GB on stage 1 "
                    "(weights 6.4, grads 3.3, optimizer 0.3, activations of 16 micro-batches 68.2)",
        check_memory=True),
    "llama3-405b-8k": dict(
        source="https://arxiv.org/abs/2407.21783 (Llama 3, Table 4: 8,192 H100, TP 8, CP 1, PP 16, DP 64, "
               "seq 8,192, batch/DP 32, 16M tokens per batch, 430 TFLOP/s per GPU, BF16 MFU 43%)",
        model="llama3-405b", n_gpus=8192, reported_flop_per_s_per_gpu=430e12,
        parallelism=dict(tp=8, pp=16, dp=64, global_batch_size=2048, schedule="interleaved", virtual_stages=4,
                         dp_sharding="optim_grads", stage_layers=(7,) + (8,) * 14 + (7,)),
        assumptions="as llama3-405b-16k; memory not checked: with 32 micro-batches Megatron's interleaved warm-up "
                    "keeps 79 chunk forwards (about 20 micro-batches of the stage) in flight on stage 0, 95.3 GB "
                    "(activations 84.2), and no schedule we model keeps fewer than pp = 16 micro-batches; the "
                    "paper's tunable-N schedule and allocator details are not modelled",
        check_memory=False),
    "megatron-gpt3-175b-96": dict(
        source="https://github.com/NVIDIA/Megatron-LM (README, 'Strong Scaling Results': GPT-3 175B with a "
               "131,072 vocabulary, seq 4,096, 1,152 sequences per batch, 96 H100: MFU 47%; benchmarks run "
               "with --overlap-grad-reduce, --overlap-param-gather and --tp-comm-overlap)",
        model="gpt3-175b", n_gpus=96, reported_flop_per_s_per_gpu=0.47 * 989.5e12,
        model_changes=dict(name="gpt3-175b-megatron", vocab=131072, seq_len=4096),
        parallelism=dict(tp=8, pp=12, dp=1, global_batch_size=1152, schedule="interleaved", virtual_stages=4,
                         dp_sharding="zero1", tp_comm_overlap=True),
        assumptions="TP 8, PP 12, 4 virtual stages (the README shows the parallelism only in an image): it "
                    "divides both 96 and 4,608 GPUs and 96 layers and fits 80 GB; distributed optimizer",
        check_memory=True),
    "megatron-gpt3-175b-4608": dict(
        source="https://github.com/NVIDIA/Megatron-LM (README, 'Strong Scaling Results': the same GPT-3 175B "
               "on 4,608 H100, same batch: MFU 42%)",
        model="gpt3-175b", n_gpus=4608, reported_flop_per_s_per_gpu=0.42 * 989.5e12,
        model_changes=dict(name="gpt3-175b-megatron", vocab=131072, seq_len=4096),
        parallelism=dict(tp=8, pp=12, dp=48, global_batch_size=1152, schedule="interleaved", virtual_stages=4,
                         dp_sharding="zero1", tp_comm_overlap=True),
        assumptions="as megatron-gpt3-175b-96",
        check_memory=True),
}


#: NeMo / Megatron-Bridge performance recipes, as their configs set them where the row does not
#: say: sequence parallelism, Megatron's distributed optimizer, gradient reduction and
#: parameter gather overlapped, TP communication overlapped (NVIDIA-NeMo/Megatron-Bridge
#: scripts/performance/configs: ``tp_comm_overlap=True`` in the Llama performance configs).
_NEMO = dict(dp_sharding="zero1", tp_comm_overlap=True)

#: Llama 3.1 405B's 126 layers over 8 stages: [assumed] the first and last stage one layer fewer
#: (Megatron's ``--decoder-first/last-pipeline-num-layers`` as NeMo's 405B recipes balance the
#: embedding and the output layer).
_405B_PP8 = (15,) + (16,) * 6 + (15,)

_DGXC = "NVIDIA/dgxc-benchmarking@68eaf7e1 (release v25.05):llama3.1/README.md and llama3.1/metadata.yaml"
_BRIDGE = "NVIDIA-NeMo/Megatron-Bridge@067f987d:docs/performance-summary-archive.md"
_MLPERF51 = "mlcommons/training_results_v5.1@441d65f4"
_MLPERF50 = "mlcommons/training_results_v5.0@0fdc28f0"
_MLPERF41 = "mlcommons/training_results_v4.1@b87b9e39"


def _dense(model: str, n_gpus: int, domain: str, precision: str, source: str, assumptions: str, *,
           reported_step_s: float | None = None, reported_tokens_per_s_per_gpu: float | None = None,
           model_changes: dict[str, Any] | None = None, check_memory: bool = False, **par: Any) -> dict[str, Any]:
    """A dense row on ``n_gpus`` GPUs of NVLink domains ``domain`` (racks or boards, the
    default scale-out of their NICs) with the NeMo recipe's settings (:data:`_NEMO`)."""
    return dict(source=source, model=model, n_gpus=n_gpus, domain=domain, precision=precision,
                reported_step_s=reported_step_s, reported_tokens_per_s_per_gpu=reported_tokens_per_s_per_gpu,
                model_changes=model_changes or {}, parallelism={**_NEMO, **par}, assumptions=assumptions,
                check_memory=check_memory)


VALIDATION.update({
    "nemo-llama31-405b-gb200-bf16": _dense(
        "llama3-405b", 128, "gb200-nvl72", "bf16", f"{_DGXC} (128 GB200, BF16: 9.347 s per step)",
        "stage layers 15/16x6/15; NeMo's performance recipe settings", reported_step_s=9.347,
        tp=4, pp=8, cp=2, dp=2, schedule="interleaved", virtual_stages=8, global_batch_size=64, stage_layers=_405B_PP8),
    "nemo-llama31-405b-gb200-fp8": _dense(
        "llama3-405b", 128, "gb200-nvl72", "fp8-delayed", f"{_DGXC} (128 GB200, FP8 delayed scaling, NeMo's "
        "default recipe: 6.131 s per step)", "as the BF16 row; FP8 parameter gather", reported_step_s=6.131,
        tp=4, pp=8, cp=2, dp=2, schedule="interleaved", virtual_stages=8, global_batch_size=64, stage_layers=_405B_PP8),
    "bridge-llama31-405b-gb300-fp8cs": _dense(
        "llama3-405b", 256, "gb300-nvl72", "fp8-current", f"{_BRIDGE} ('26.02.01 NeMo Container': 1,024 tokens/s/GPU)",
        "stage layers 15/16x6/15", reported_tokens_per_s_per_gpu=1024,
        tp=2, pp=8, cp=2, dp=8, schedule="interleaved", virtual_stages=4, global_batch_size=1536, stage_layers=_405B_PP8),
    "bridge-llama31-405b-gb300-mxfp8": _dense(
        "llama3-405b", 256, "gb300-nvl72", "mxfp8", f"{_BRIDGE} ('26.02.01 NeMo Container': 949 tokens/s/GPU)",
        "stage layers 15/16x6/15", reported_tokens_per_s_per_gpu=949,
        tp=2, pp=8, cp=2, dp=8, schedule="interleaved", virtual_stages=4, global_batch_size=1536, stage_layers=_405B_PP8),
    "bridge-llama31-405b-gb300-tp4-fp8cs": _dense(
        "llama3-405b", 256, "gb300-nvl72", "fp8-current", f"{_BRIDGE} ('26.06 NeMo Container': 1,048 tokens/s/GPU)",
        "stage layers 15/16x6/15", reported_tokens_per_s_per_gpu=1048,
        tp=4, pp=8, dp=8, schedule="interleaved", virtual_stages=4, global_batch_size=1536, stage_layers=_405B_PP8),
    "bridge-llama31-405b-gb300-tp4-nvfp4": _dense(
        "llama3-405b", 256, "gb300-nvl72", "nvfp4", f"{_BRIDGE} ('26.06 NeMo Container': 1,413 tokens/s/GPU)",
        "stage layers 15/16x6/15", reported_tokens_per_s_per_gpu=1413,
        tp=4, pp=8, dp=8, schedule="interleaved", virtual_stages=4, global_batch_size=1536, stage_layers=_405B_PP8),
    "mlperf50-llama31-405b-h100-8192": _dense(
        "llama3-405b", 8192, "hgx-h100", "fp8-delayed", f"{_MLPERF50}: NVIDIA/results/eos-dfw_n1024_ngc25.01_nemo/"
        "llama31_405b/ (median train_step_time 5.181 s) and config_DGXH100_1024x8x24xtp8pp8cp2.sh",
        "stage layers 15/16x6/15", reported_step_s=5.181,
        tp=8, pp=8, cp=2, dp=64, schedule="interleaved", virtual_stages=8, global_batch_size=1536, stage_layers=_405B_PP8),
    "mlperf50-llama31-405b-gb200-2496": _dense(
        "llama3-405b", 2496, "gb200-nvl72", "fp8-delayed", f"{_MLPERF50}: IBM+CoreWeave+NVIDIA/results/"
        "carina_ngpu2496_ngc25.04_nemo/llama31_405b/ (median step 5.823 s)", "stage layers 15/16x6/15; 35 racks, "
        "2,496 of their 2,520 GPUs", reported_step_s=5.823,
        tp=4, pp=8, cp=2, dp=39, schedule="interleaved", virtual_stages=8, global_batch_size=1248, stage_layers=_405B_PP8),
    "mlperf50-llama31-405b-gb200-512-fp8": _dense(
        "llama3-405b", 512, "gb200-nvl72", "fp8-delayed", f"{_MLPERF50}: NVIDIA/results/tyche_ngpu512_ngc25.04_nemo/"
        "llama31_405b/ (median step 19.43 s)", "stage layers 15/16x6/15", reported_step_s=19.43,
        tp=4, pp=8, cp=2, dp=8, schedule="interleaved", virtual_stages=8, global_batch_size=896, stage_layers=_405B_PP8),
    "mlperf51-llama31-405b-gb200-512-nvfp4": _dense(
        "llama3-405b", 512, "gb200-nvl72", "nvfp4", f"{_MLPERF51}: NVIDIA/results/tyche_ngpu512_ngc25.09_nemo/"
        "llama31_405b/ (median step 17.26 s)", "stage layers 15/16x6/15; TP communication not overlapped (v5.1)",
        reported_step_s=17.26, tp_comm_overlap=False,
        tp=4, pp=8, cp=2, dp=8, schedule="interleaved", virtual_stages=8, global_batch_size=1152, stage_layers=_405B_PP8),
    "mlperf51-llama31-405b-gb300-512-nvfp4": _dense(
        "llama3-405b", 512, "gb300-nvl72", "nvfp4", f"{_MLPERF51}: NVIDIA/results/theia_ngpu512_ngc25.09_nemo/"
        "llama31_405b/ (median step 13.14 s)", "stage layers 15/16x6/15; no TP communication overlap (the config's)",
        reported_step_s=13.14, tp_comm_overlap=False,
        tp=2, pp=8, cp=2, dp=16, schedule="interleaved", virtual_stages=8, global_batch_size=1152, stage_layers=_405B_PP8),
    "mlperf51-llama31-8b-gb300-8": _dense(
        "llama3-8b", 8, "gb300-nvl72", "nvfp4+fp8-attention", f"{_MLPERF51}: NVIDIA/results/theia_ngpu8_ngc25.09_nemo/"
        "llama31_8b/ (median step 0.3466 s)", "NVFP4 GEMMs and FP8 attention", reported_step_s=0.3466,
        tp=1, dp=8, micro_batch_size=2, global_batch_size=16, tp_comm_overlap=False),
    "mlperf51-llama31-8b-gb200-8": _dense(
        "llama3-8b", 8, "gb200-nvl72", "nvfp4+fp8-attention", f"{_MLPERF51}: NVIDIA/results/tyche_ngpu8_ngc25.09_nemo/"
        "llama31_8b/ (median step 0.4055 s)", "NVFP4 GEMMs and FP8 attention", reported_step_s=0.4055,
        tp=1, dp=8, micro_batch_size=2, global_batch_size=16, tp_comm_overlap=False),
    "mlperf41-gpt3-175b-b200-64": _dense(
        "gpt3-175b", 64, "hgx-b200", "fp8-delayed", f"{_MLPERF41}: NVIDIA/results/b200_n8_preview_nemo/gpt3/ "
        "(median step 36.23 s) and config_DGXB200_8x8x1024x4x8_mbs2_cg.sh", "seq 2,048 (the benchmark's)",
        reported_step_s=36.23, model_changes=dict(name="gpt3-175b-2k", seq_len=2048),
        tp=4, pp=8, dp=2, micro_batch_size=2, schedule="interleaved", virtual_stages=6, global_batch_size=2048),
    "mlperf41-gpt3-175b-h100-512": _dense(
        "gpt3-175b", 512, "hgx-h100", "fp8-delayed", f"{_MLPERF41}: NVIDIA/results/eos_n64_ngc24.09_nemo/gpt3/ "
        "(median step 9.496 s) and config_DGXH100_64x8x128x4x8_mbs2.sh", "seq 2,048 (the benchmark's)",
        reported_step_s=9.496, model_changes=dict(name="gpt3-175b-2k", seq_len=2048),
        tp=4, pp=8, dp=16, micro_batch_size=2, schedule="interleaved", virtual_stages=6, global_batch_size=2048),
})

# Megatron-Bridge's Llama 3 70B on 64 GPUs, MXFP8 and NVFP4 on one mapping per system
# ('26.04.01 NeMo Container', tokens/s/GPU)
VALIDATION.update({
    f"bridge-llama3-70b-{gpu}-{recipe}": _dense(
        "llama3-70b", 64, f"{gpu}-nvl72", recipe, f"{_BRIDGE} ('26.04.01 NeMo Container': {tokens:,} tokens/s/GPU)",
        "NeMo's performance recipe settings", reported_tokens_per_s_per_gpu=tokens,
        tp=tp, pp=4, dp=64 // (4 * tp), schedule="interleaved", virtual_stages=5, global_batch_size=256)
    for gpu, tp, recipe, tokens in (("gb300", 1, "mxfp8", 4864), ("gb300", 1, "nvfp4", 7296),
                                    ("gb200", 2, "mxfp8", 3712), ("gb200", 2, "nvfp4", 4864))
})



def validation_step(name: str, **options: Any) -> TrainingStep:
    """The :class:`TrainingStep` of a :data:`VALIDATION` or :data:`MOE_VALIDATION` case on its GPUs (HGX H100 boards on
    Quantum-2 unless the case names another NVLink domain, whose NICs' default scale-out then
    joins them), in its precision, with the default compute model unless ``compute=`` is given.

    Example::

        step = fs.training.validation_step("megatron-gpt3-175b-96")
        step.par.n_gpus                        # 96
        step.estimate().mfu                    # about 0.51; Megatron-LM reports 0.47
    """
    cases = {**VALIDATION, **MOE_VALIDATION}
    case = cases[choice("validation case", name, cases)]
    m = model(case["model"]).replace(**case.get("model_changes", {}))
    par = Parallelism(**case["parallelism"])
    domain = case.get("domain", "hgx-h100")
    per = 72 if "nvl72" in domain else 8
    fabric = cluster(domain=domain, n_domains=-(-case["n_gpus"] // per),
                     scale_out="quantum-2" if domain == "hgx-h100" else None)
    if case.get("placement") == "domain":
        par = domain_aware(par, fabric)
    if "moe" in case:
        options.setdefault("moe", case["moe"])
    options.setdefault("check_memory", case["check_memory"])
    recipe = case.get("precision", "bf16")
    if recipe.endswith("+fp8-attention"):
        options.setdefault("precision", Precision(recipe.split("+")[0], fp8_attention=True))
    else:
        options.setdefault("precision", recipe)
    return TrainingStep(m, par, fabric, **options)


#: Rows the model misses by more than the tolerance (dense 10%), each with its suspected cause.
#: None is fitted: the model's mechanisms stand, the rows are pinned where they fall.
_FAST_AT_SCALE = ("the model is fast: its layers match the layers measured for fabricsim, but those and the "
                  "published matmul sweeps are seconds-long bursts; the SMs that overlapped communication kernels "
                  "take from the compute are modelled (compute_beside_comm_s: 1.3-2.9 points on the H100 rows); "
                  "suspected: the sustained clock of a GPU at its power limit over hours of GEMMs (no published "
                  "figure to model it by), and the SMs of the pipeline transfers' and CP ring exchanges' kernels, "
                  "not counted")
_GB200 = ("the model is fast on GB200 (GEMMs at the GB200 matmul sweep's 0.729 of 2.5 PFLOP/s, cuDNN attention "
          "at 0.55): suspected as for H100 (sustained clocks of a 1.2 kW part at the rack's power cap), more so on "
          "the NVL72 racks; the communication kernels' SMs are modelled (0.2-5.3 points on these rows); GB300 rows "
          "with the same fractions land within 10%")
_NVFP4 = ("NVFP4 GEMMs at 0.763 of the FP4 peak, a square 16384^3 cuBLASLt sweep on GB200; training's "
          "thinner shards and NVFP4's per-tensor amax and scale work reach less (the same recipe at TP1 on "
          "Llama 3 70B lands within 1%)")
KNOWN_MISSES: dict[str, str] = {
    "llama3-405b-8k": _FAST_AT_SCALE + "; and the paper's schedule with a tunable number of micro-batches per "
                                       "round is not modelled",
    "nemo-llama31-405b-gb200-bf16": _GB200,
    "nemo-llama31-405b-gb200-fp8": _GB200,
    "bridge-llama31-405b-gb300-tp4-nvfp4": _NVFP4,
    "bridge-llama3-70b-gb200-mxfp8": _GB200,
    "bridge-llama3-70b-gb200-nvfp4": _GB200,
    "mlperf50-llama31-405b-gb200-2496": _GB200,
    "mlperf50-llama31-405b-gb200-512-fp8": _GB200,
    "mlperf51-llama31-405b-gb200-512-nvfp4": _GB200,
    "mlperf51-llama31-405b-gb300-512-nvfp4": _NVFP4,
    "mlperf41-gpt3-175b-b200-64": _GB200.replace("on GB200 (GEMMs at the GB200 matmul sweep's 0.729 of 2.5 "
                                                 "PFLOP/s", "on B200 (GEMMs at the B200 matmul sweep's 0.763 "
                                                 "of 4.5 PFLOP/s in FP8").replace(", more so on the NVL72 racks",
                                                                                  "; a Preview-category system"),
}


#: Published mixture-of-experts steps (tests/python/test_training_moe.py: within 15% or a
#: miss with its reason, every row pinned). Compared in tokens per second per GPU
#: (``reported_tokens_per_s_per_gpu``), which no FLOP count changes, where the source gives them;
#: ``published_flop_per_s_per_gpu`` is the publisher's own model FLOP/s, for reference.
#: ``domain`` as in :data:`VALIDATION`; ``placement="domain"`` places the ranks with
#: :func:`domain_aware`; ``moe`` the :class:`MoeOptions`; ``miss`` the suspected cause of a row
#: beyond 15%.
_MEGATRON_MOE_ZOO = ("https://github.com/yanring/Megatron-MoE-ModelZoo/blob/e8650517/best_practice/qwen3/readme.md "
                     "(H100 table: Qwen3-235B-A22B on 256 H100, 8 x 400 Gb/s InfiniBand per node")
_BRIDGE_2604 = ("https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/067f987d/docs/performance-summary-archive.md "
                "('26.04.01 NeMo Container': GPT-OSS-120B, 64 GPUs, BF16, GBS 1280, sequence 4096, forced balance; "
                "configs scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py @21d102f5, dispatcher "
                "default moe_token_dispatcher_type='alltoall' in src/megatron/bridge/recipes/gpt_oss/gpt_oss.py)")
_GPT_OSS_MISS = ("the published matmul and attention efficiencies the compute model applies are far above what "
                 "GPT-OSS's small shapes reach in Megatron (hidden 2880, head dimension 64: 16-18% MFU on every "
                 "system, against 25-34% for Qwen3 and DeepSeek-V3); its 128-token sliding-window attention on "
                 "alternate layers and attention sinks are not modelled")
_FP8_MISS = ("the model is 5-14% fast on the dense BF16 rows (every GEMM at its best published rate) and more "
             "so in low precision: every expert's grouped GEMM runs at the FP8 matmul sweep's fraction of the FP8 peak, "
             "where the grouped FP8 kernels on these shapes, with their per-expert quantization, reach less (the "
             "measured FP8 speedups of these runs are 1.13-1.38x); suspected, not measured")
_QWEN3_PAR = dict(tp=2, pp=8, dp=16, ep=32, etp=1, global_batch_size=2048, schedule="interleaved", virtual_stages=4,
                  stage_layers=(11, 12, 12, 12, 12, 12, 12, 11), dp_sharding="zero1",
                  recompute_modules=("layernorm", "moe_act"))
_QWEN3_ASSUMED = ("94 layers over 8 stages of 4 virtual stages as (11, 12 x 6, 11) (the README does not give the "
                  "split); distributed optimizer; "
                  "forced balance (the table does not say)")
MOE_VALIDATION: dict[str, dict[str, Any]] = {
    "qwen3-235b-h100-deepep": dict(
        source=_MEGATRON_MOE_ZOO + ": TP2 EP32 PP8 VPP4 ETP1 DP16, GBS 2048, seq 4096, BF16, flex dispatcher on "
               "DeepEP: 19.7 s/step, 245 TFLOP/s per GPU, 1,663 tokens/s per GPU)",
        check_memory=False, model="qwen3-235b-a22b", n_gpus=256, reported_tokens_per_s_per_gpu=1663.0, published_flop_per_s_per_gpu=245e12,
        parallelism=_QWEN3_PAR, moe=dict(dispatcher="deepep"),
        domain="hgx-h100",
        assumptions=_QWEN3_ASSUMED),
    "qwen3-235b-h100-deepep-overlap": dict(
        source=_MEGATRON_MOE_ZOO + ": as qwen3-235b-h100-deepep with 1F1B all-to-all overlap: 17.6 s/step, 276 "
               "TFLOP/s per GPU, 1,862 tokens/s per GPU)",
        check_memory=False, model="qwen3-235b-a22b", n_gpus=256, reported_tokens_per_s_per_gpu=1862.0, published_flop_per_s_per_gpu=276e12,
        parallelism=_QWEN3_PAR, moe=dict(dispatcher="deepep", overlap=True),
        domain="hgx-h100",
        assumptions=_QWEN3_ASSUMED,
        miss="the overlap hides the whole dispatch and combine behind the chunk's compute (the step gains 33% here); "
             "Megatron's 1F1B overlap pairs one micro-batch's forward with another's backward layer by layer, and "
             "each layer's dispatch waits for its attention and its expert GEMMs for the dispatch, so part stays "
             "exposed (the run gains 11%); the layer-wise pairing is not modelled"),
    "qwen3-235b-h100-alltoall-pp32": dict(
        source=_MEGATRON_MOE_ZOO + ": TP2 EP8 PP32 VPP3 DP4, GBS 2048, seq 4096, BF16, alltoall dispatcher, EP "
               "inside a node (main 1e057005): 24.2 s/step, 200 TFLOP/s per GPU, 1,354 tokens/s per GPU)",
        check_memory=False, model="qwen3-235b-a22b", n_gpus=256, reported_tokens_per_s_per_gpu=1354.0, published_flop_per_s_per_gpu=200e12,
        parallelism=dict(tp=2, pp=32, dp=4, ep=8, etp=1, global_batch_size=2048, schedule="interleaved",
                         virtual_stages=3, stage_layers=(2,) + (3,) * 30 + (2,), dp_sharding="zero1",
                         recompute_modules=("layernorm", "moe_act")),
        domain="hgx-h100",
        assumptions="94 layers and the embedding and loss counted as layers over 96 virtual stages (Megatron's "
                    "account-for-embedding and -loss pipeline split): one layer per chunk, the first and last chunk "
                    "none (here the first stage's last chunk); distributed optimizer; ETP 1 (as the EP32 run); "
                    "forced balance",
        miss="the model runs 96 one-layer chunks per micro-batch at the GEMMs' best rates; the run pays, per chunk "
             "and micro-batch (512 of them), overheads the model has no term for (kernel launches and pipeline "
             "handshakes of a one-layer chunk), and its older code (main 1e057005) lacks the fused dispatcher "
             "kernels of the EP32 runs"),
    "grok1-314b-gb200-bf16": dict(
        source="https://github.com/NVIDIA/dgxc-benchmarking/blob/68eaf7e1/grok1/README.md (NeMo 25.04, 128 GB200: "
               "TP4 EP8 ETP4 PP1 DP32, GBS 256, seq 8192, BF16: 7.325 s/step, 2,237 tokens/s per GPU; dispatcher "
               "alltoall, the default of NeMo's Mixtral config)",
        check_memory=False, model="grok1-314b-proxy", n_gpus=128, reported_tokens_per_s_per_gpu=2237.0,
        published_flop_per_s_per_gpu=1166e12,
        parallelism=dict(tp=4, dp=32, ep=8, etp=4, global_batch_size=256, dp_sharding="zero1"),
        domain="gb200-nvl72", placement="domain",
        assumptions="the ranks placed so that each 32-rank expert block stays in one rack (Megatron's order on "
                    "full racks would put ranks 64-95 across two); distributed optimizer; CX7 400G InfiniBand "
                    "between racks; routing balanced (forcing not stated)"),
    "gpt-oss-120b-gb200": dict(
        source=_BRIDGE_2604 + ": 64 GB200, TP1 PP1 EP64 DP64, MBS 4, alltoall with EP all-to-all overlap, "
               "recompute layernorm and moe_act: 16,640 tokens/s per GPU, 452 TFLOP/s",
        check_memory=False, model="gpt-oss-120b", n_gpus=64, reported_tokens_per_s_per_gpu=16640.0, published_flop_per_s_per_gpu=452e12,
        parallelism=dict(dp=64, ep=64, micro_batch_size=4, global_batch_size=1280, dp_sharding="zero1",
                         recompute_modules=("layernorm", "moe_act")),
        moe=dict(overlap=True), domain="gb200-nvl72",
        assumptions="one rack; distributed optimizer",
        miss=_GPT_OSS_MISS),
    "gpt-oss-120b-b200": dict(
        source=_BRIDGE_2604 + ": 64 B200, TP1 PP1 EP8 DP64, MBS 4, alltoall, recompute layernorm and moe_act: "
               "13,568 tokens/s per GPU, 369 TFLOP/s",
        check_memory=False, model="gpt-oss-120b", n_gpus=64, reported_tokens_per_s_per_gpu=13568.0, published_flop_per_s_per_gpu=369e12,
        parallelism=dict(dp=64, ep=8, micro_batch_size=4, global_batch_size=1280, dp_sharding="zero1",
                         recompute_modules=("layernorm", "moe_act")),
        domain="hgx-b200",
        assumptions="distributed optimizer",
        miss=_GPT_OSS_MISS),
    "gpt-oss-120b-h100": dict(
        source=_BRIDGE_2604 + ": 64 H100, TP1 PP4 EP8 DP16, MBS 1, alltoall, recompute layernorm and moe_act: "
               "5,824 tokens/s per GPU, 158 TFLOP/s",
        check_memory=False, model="gpt-oss-120b", n_gpus=64, reported_tokens_per_s_per_gpu=5824.0, published_flop_per_s_per_gpu=158e12,
        parallelism=dict(pp=4, dp=16, ep=8, global_batch_size=1280, dp_sharding="zero1",
                         recompute_modules=("layernorm", "moe_act")),
        domain="hgx-h100",
        assumptions="1F1B schedule (no virtual stages given); distributed optimizer",
        miss=_GPT_OSS_MISS),
    "gpt-oss-120b-gb300": dict(
        source=_BRIDGE_2604 + ": 64 GB300, TP1 PP1 EP64 DP64, MBS 4, alltoall, CUDA graphs on attention, router and "
               "preprocessing: 19,200 tokens/s per GPU, 523 TFLOP/s",
        check_memory=False, model="gpt-oss-120b", n_gpus=64, reported_tokens_per_s_per_gpu=19200.0, published_flop_per_s_per_gpu=523e12,
        parallelism=dict(dp=64, ep=64, micro_batch_size=4, global_batch_size=1280, dp_sharding="zero1"),
        domain="gb300-nvl72",
        assumptions="one rack; distributed optimizer", miss=_GPT_OSS_MISS),
    "gpt-oss-120b-b300": dict(
        source=_BRIDGE_2604 + ": 64 B300, TP1 PP1 EP8 DP64, MBS 4, flex dispatcher on HybridEP, CUDA graphs: 15,232 "
               "tokens/s per GPU, 414 TFLOP/s",
        check_memory=False, model="gpt-oss-120b", n_gpus=64, reported_tokens_per_s_per_gpu=15232.0, published_flop_per_s_per_gpu=414e12,
        parallelism=dict(dp=64, ep=8, micro_batch_size=4, global_batch_size=1280, dp_sharding="zero1"),
        moe=dict(dispatcher="hybridep"), domain="hgx-b300",
        assumptions="distributed optimizer; ConnectX-8 800G InfiniBand between boards", miss=_GPT_OSS_MISS),
    "grok1-314b-gb200-fp8": dict(
        source="https://github.com/NVIDIA/dgxc-benchmarking/blob/68eaf7e1/grok1/README.md (as grok1-314b-gb200-bf16, "
               "FP8 with NeMo's default per-tensor delayed scaling: 5.298 s/step, 3,093 tokens/s per GPU)",
        check_memory=False, model="grok1-314b-proxy", n_gpus=128, reported_tokens_per_s_per_gpu=3093.0, published_flop_per_s_per_gpu=1612e12,
        parallelism=dict(tp=4, dp=32, ep=8, etp=4, global_batch_size=256, dp_sharding="zero1"), precision="fp8-delayed",
        domain="gb200-nvl72", placement="domain",
        assumptions="as grok1-314b-gb200-bf16; the dispatch in BF16"),
    "deepseek-v3-h100-fp8": dict(
        source="https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/067f987d/docs/performance-summary-archive.md "
               "('25.09 NeMo Container', DGX-H100: DeepSeek-V3 with MTP on 1,024 H100, TP2 PP8 VP4 EP64 ETP1, GBS "
               "8192, seq 4096, FP8 current scaling, flex dispatcher on DeepEP, 1F1B all-to-all overlap, recompute "
               "mla_up_proj and mlp, forced balance: 1,297 tokens/s per GPU, 338 TFLOP/s; recipe "
               "scripts/performance/configs/deepseek/deepseek_v3_llm_pretrain.yaml @6725f704)",
        check_memory=False, model="deepseek-v3", n_gpus=1024, reported_tokens_per_s_per_gpu=1297.0, published_flop_per_s_per_gpu=338e12,
        parallelism=dict(tp=2, pp=8, dp=64, ep=64, etp=1, global_batch_size=8192, schedule="interleaved",
                         virtual_stages=4, stage_layers=(7, 8, 8, 8, 8, 8, 8, 6), dp_sharding="zero1",
                         recompute_modules=("mla_up_proj", "mlp")),
        precision="fp8-current", moe=dict(dispatcher="deepep", overlap=True),
        domain="hgx-h100",
        assumptions="the PP layout Et|(tt|)*30mL as stages of (7, 8 x 6, 6) layers, each stage's chunks split evenly; "
                    "the MTP module on the last stage; distributed optimizer; the dispatch in BF16",
        miss=_FP8_MISS),
    "deepseek-v3-h800-production": dict(
        source="https://arxiv.org/abs/2412.19437 (DeepSeek-V3 Technical Report, sections 3.1-3.3 and Table 1: 2,048 "
               "H800, PP16 with DualPipe, EP64 over 8 nodes, ZeRO-1, no TP, FP8 blockwise, FP8 dispatch, seq 4096, "
               "batch ramped to 15,360; 180K H800 GPU-hours per trillion tokens = 1,543 tokens/s per GPU)",
        check_memory=False, model="deepseek-v3", n_gpus=2048, reported_tokens_per_s_per_gpu=1543.0, published_flop_per_s_per_gpu=340e12,
        parallelism=dict(pp=16, dp=128, ep=64, global_batch_size=15360, stage_layers=(3,) + (4,) * 14 + (2,),
                         dp_sharding="zero1"),
        precision="fp8-blockwise", moe=dict(dispatcher="deepep", fp8_dispatch=True, overlap=True),
        domain="hgx-h800",
        assumptions="HGX H800 boards (164.8 GB/s of NVLink per GPU after the payload efficiency; DeepEP "
                    "measures about 160); Megatron's "
                    "1F1B schedule in place of DualPipe (120 micro-batches: a small bubble either way), its overlap "
                    "as the MoE overlap; the batch at the end of its ramp; stages of (3, 4 x 14, 2) layers, the MTP "
                    "module on the last; micro-batch 1; 20 of 132 SMs for the dispatch"),
    "deepseek-v3-gb300-bf16": dict(
        source="https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/067f987d/docs/performance-summary-archive.md "
               "('25.11 NeMo Container', DGX-GB300: DeepSeek-V3 without MTP on 256 GB300, TP1 PP2 VP4 EP32, GBS 4096, "
               "seq 4096, BF16: 3,848 tokens/s per GPU, 961 TFLOP/s; HybridEP in every GB300 DeepSeek-V3 recipe, "
               "scripts/performance/configs/deepseek/*workload_base_configs.py)",
        check_memory=False, model="deepseek-v3", model_changes=dict(mtp_layers=0), n_gpus=256, reported_tokens_per_s_per_gpu=3848.0,
        published_flop_per_s_per_gpu=961e12,
        parallelism=dict(pp=2, dp=128, ep=32, global_batch_size=4096, schedule="interleaved", virtual_stages=4,
                         stage_layers=(31, 30), dp_sharding="zero1"),
        moe=dict(dispatcher="hybridep"), domain="gb300-nvl72",
        placement="domain",
        assumptions="61 layers as stages of 31 and 30; each 32-rank expert group in one rack (64 of its 72 GPUs); "
                    "distributed optimizer; forced balance"),
    "deepseek-v3-gb300-mxfp8": dict(
        source="same table as deepseek-v3-gb300-bf16, MXFP8: 4,357 tokens/s per GPU, 1,088 TFLOP/s",
        check_memory=False, model="deepseek-v3", model_changes=dict(mtp_layers=0), n_gpus=256, reported_tokens_per_s_per_gpu=4357.0,
        published_flop_per_s_per_gpu=1088e12,
        parallelism=dict(pp=2, dp=128, ep=32, global_batch_size=4096, schedule="interleaved", virtual_stages=4,
                         stage_layers=(31, 30), dp_sharding="zero1"),
        precision="mxfp8", moe=dict(dispatcher="hybridep"),
        domain="gb300-nvl72", placement="domain",
        assumptions="as deepseek-v3-gb300-bf16; the dispatch in BF16",
        miss=_FP8_MISS),
    "qwen3-235b-gb300-mxfp8": dict(
        source="https://github.com/yanring/Megatron-MoE-ModelZoo/blob/e8650517/best_practice/qwen3/readme.md (GB300 "
               "table: Qwen3-235B-A22B on 64 GB300, TP1 PP1 EP64, GBS 8192, seq 4096, MXFP8, flex dispatcher on "
               "HybridEP with all-to-all overlap, forced balance: 1,055 TFLOP/s per GPU; tokens/s not published)",
        check_memory=False, model="qwen3-235b-a22b", n_gpus=64, reported_flop_per_s_per_gpu=1055e12,
        parallelism=dict(dp=64, ep=64, global_batch_size=8192, dp_sharding="zero1"),
        precision="mxfp8", moe=dict(dispatcher="hybridep", overlap=True),
        domain="gb300-nvl72",
        assumptions="compared in model FLOP/s: this model's count of Qwen3-235B (148.3 GFLOP per token) is within "
                    "1% of the ModelZoo's own (245 TFLOP/s at 1,663 tokens/s on H100: 147.3); distributed optimizer",
        miss=_FP8_MISS + "; and the overlap hides every dispatch (qwen3-235b-h100-deepep-overlap)"),
}


def validate_training(**options: Any) -> pa.Table:
    """Every :data:`VALIDATION` and :data:`MOE_VALIDATION` case, analytically: ``case, gpu, n_gpus, precision, metric``
    (what the source publishes: "TFLOP/s per GPU", "step s" or "tokens/s per GPU"),
    ``reported, modelled`` (in that metric), ``error`` (modelled throughput over reported,
    minus 1: positive where the model is fast), ``modelled_tflops`` (model FLOP/s per GPU),
    ``modelled_mfu`` (against the precision's dense peak), ``miss`` (the suspected cause where
    the row is a :data:`KNOWN_MISSES`, or a MoE row's ``miss``), ``source, assumptions``.

    Example::

        table = fs.training.validate_training()   # closed forms: about a second for every row
        table.select(["case", "reported", "modelled", "error"])
    """
    rows = []
    for name, case in {**VALIDATION, **MOE_VALIDATION}.items():
        st = validation_step(name, **options)
        e = st.estimate()
        if case.get("reported_flop_per_s_per_gpu"):
            metric, rep, mod = "TFLOP/s per GPU", case["reported_flop_per_s_per_gpu"] / 1e12, e.model_flop_per_s_per_gpu / 1e12
            error = mod / rep - 1
        elif case.get("reported_step_s"):
            metric, rep, mod = "step s", case["reported_step_s"], e.step_s
            error = rep / mod - 1
        else:
            metric, rep, mod = "tokens/s per GPU", case["reported_tokens_per_s_per_gpu"], e.tokens_per_s / st.par.n_gpus
            error = mod / rep - 1
        rows.append((name, st.gpu.name, case["n_gpus"], case.get("precision", "bf16"), metric, rep, mod, error,
                     e.model_flop_per_s_per_gpu / 1e12, e.mfu, KNOWN_MISSES.get(name, case.get("miss")), case["source"],
                     case["assumptions"]))
    cols = list(zip(*rows))
    names = ["case", "gpu", "n_gpus", "precision", "metric", "reported", "modelled", "error", "modelled_tflops",
             "modelled_mfu", "miss", "source", "assumptions"]
    return pa.table({n: list(c) for n, c in zip(names, cols)})
