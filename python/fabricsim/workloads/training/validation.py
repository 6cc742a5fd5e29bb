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
from .precision import Precision
from .step import Parallelism, TrainingStep

__all__ = ["VALIDATION", "KNOWN_MISSES", "validation_step", "validate_training"]


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
    """The :class:`TrainingStep` of a :data:`VALIDATION` case on its GPUs (HGX H100 boards on
    Quantum-2 unless the case names another NVLink domain, whose NICs' default scale-out then
    joins them), in its precision, with the default compute model unless ``compute=`` is given.

    Example::

        step = fs.training.validation_step("megatron-gpt3-175b-96")
        step.par.n_gpus                        # 96
        step.estimate().mfu                    # about 0.52; Megatron-LM reports 0.47
    """
    case = VALIDATION[choice("validation case", name, VALIDATION)]
    m = model(case["model"]).replace(**case.get("model_changes", {}))
    par = Parallelism(**case["parallelism"])
    domain = case.get("domain", "hgx-h100")
    per = 72 if "nvl72" in domain else 8
    fabric = cluster(domain=domain, n_domains=-(-case["n_gpus"] // per),
                     scale_out="quantum-2" if domain == "hgx-h100" else None)
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
                  "published matmul sweeps are seconds-long bursts; suspected: the sustained clock of a GPU at "
                  "its power limit over hours of GEMMs, and the SMs NCCL's kernels take from the GEMMs while "
                  "data-parallel and pipeline traffic overlaps them, neither modelled")
_GB200 = ("the model is fast on GB200 (GEMMs at the GB200 matmul sweep's 0.729 of 2.5 PFLOP/s, cuDNN attention "
          "at 0.55): suspected as for H100 (sustained clocks of a 1.2 kW part at the rack's power cap, "
          "communication kernels' SMs), more so on the NVL72 racks; GB300 rows with the same fractions land "
          "within 10%")
_NVFP4 = ("NVFP4 GEMMs at 0.763 of the FP4 peak, a square 16384^3 cuBLASLt sweep on GB200; training's "
          "thinner shards and NVFP4's per-tensor amax and scale work reach less (the same recipe at TP1 on "
          "Llama 3 70B lands within 1%)")
KNOWN_MISSES: dict[str, str] = {
    "llama3-405b-16k": _FAST_AT_SCALE,
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


def validate_training(**options: Any) -> pa.Table:
    """Every :data:`VALIDATION` case, analytically: ``case, gpu, n_gpus, precision, metric``
    (what the source publishes: "TFLOP/s per GPU", "step s" or "tokens/s per GPU"),
    ``reported, modelled`` (in that metric), ``error`` (modelled throughput over reported,
    minus 1: positive where the model is fast), ``modelled_tflops`` (model FLOP/s per GPU),
    ``modelled_mfu`` (against the precision's dense peak), ``miss`` (the suspected cause where
    the row is a :data:`KNOWN_MISSES`), ``source, assumptions``.

    Example::

        table = fs.training.validate_training()   # closed forms: about a second for every row
        table.select(["case", "reported", "modelled", "error"])
    """
    rows = []
    for name, case in VALIDATION.items():
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
                     e.model_flop_per_s_per_gpu / 1e12, e.mfu, KNOWN_MISSES.get(name), case["source"],
                     case["assumptions"]))
    cols = list(zip(*rows))
    names = ["case", "gpu", "n_gpus", "precision", "metric", "reported", "modelled", "error", "modelled_tflops",
             "modelled_mfu", "miss", "source", "assumptions"]
    return pa.table({n: list(c) for n, c in zip(names, cols)})
