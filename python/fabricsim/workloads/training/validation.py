"""Published training steps the model is held to (tests/python/test_training.py, within 15%),
each with its source and the assumptions where the source is silent, and the table of the
model against them."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ..._checks import choice
from ...fabrics import cluster
from .model import model
from .step import Parallelism, TrainingStep

__all__ = ["VALIDATION", "validation_step", "validate_training"]


#: Public step figures the model is held to (tests/python/test_training.py, within 15%).
#: ``reported_flop_per_s_per_gpu`` is model FLOP/s per GPU (BF16); MFU = that / 989.5e12.
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


def validation_step(name: str, **options: Any) -> TrainingStep:
    """The :class:`TrainingStep` of a :data:`VALIDATION` case on an HGX H100 cluster
    (Quantum-2 scale-out), with the default compute model unless ``compute=`` is given.

    Example::

        step = fs.training.validation_step("megatron-gpt3-175b-96")
        step.par.n_gpus                        # 96
        step.estimate().mfu                    # about 0.52; Megatron-LM reports 0.47
    """
    case = VALIDATION[choice("validation case", name, VALIDATION)]
    m = model(case["model"]).replace(**case.get("model_changes", {}))
    par = Parallelism(**case["parallelism"])
    fabric = cluster(domain="hgx-h100", n_domains=case["n_gpus"] // 8, scale_out="quantum-2")
    options.setdefault("check_memory", case["check_memory"])
    return TrainingStep(m, par, fabric, **options)


def validate_training(**options: Any) -> pa.Table:
    """Every :data:`VALIDATION` case, analytically: ``case, n_gpus, reported_tflops,
    modelled_tflops, error, reported_mfu, modelled_mfu, precision, source, assumptions``.

    Example::

        table = fs.training.validate_training()   # closed forms: well under a second
        table.select(["case", "reported_tflops", "modelled_tflops", "error"])
    """
    rows = []
    for name, case in VALIDATION.items():
        st = validation_step(name, **options)
        e = st.estimate()
        rep = case["reported_flop_per_s_per_gpu"]
        rows.append((name, case["n_gpus"], rep / 1e12, e.model_flop_per_s_per_gpu / 1e12,
                     e.model_flop_per_s_per_gpu / rep - 1, rep / st.peak_flop_per_s, e.mfu,
                     st.precision.recipe, case["source"], case["assumptions"]))
    cols = list(zip(*rows))
    names = ["case", "n_gpus", "reported_tflops", "modelled_tflops", "error", "reported_mfu", "modelled_mfu",
             "precision", "source", "assumptions"]
    return pa.table({n: list(c) for n, c in zip(names, cols)})
