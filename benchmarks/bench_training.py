"""Training steps: Llama 3 405B on 16,384 H100 (TP 8, PP 16, DP 128, 16 micro-batches
of 8,192 tokens per replica, interleaved with 4 virtual stages), built as one scenario and
simulated at flow level, and the same step estimated analytically. The fabric and the checked
plan are built in ``setup``; each timed call builds and runs the DAG (or the closed form)."""

import fabricsim as fs
from fabricsim import training


class Llama405B16kH100:
    timeout = 900
    number = 1
    repeat = (1, 3, 300.0)
    warmup_time = 0

    def setup(self):
        self.step = training.validation_step("llama3-405b-16k")
        self.step_tp_analytical = training.validation_step("llama3-405b-16k", tp_comm="analytical")

    def time_step_flow_level(self):
        self.step.run()

    def peakmem_step_flow_level(self):
        self.step.run()

    def time_step_flow_level_tp_analytical(self):
        self.step_tp_analytical.run()

    def peakmem_step_flow_level_tp_analytical(self):
        self.step_tp_analytical.run()


class Llama405BEstimate:
    number = 20
    repeat = (3, 10, 20.0)

    def setup(self):
        self.fabric = fs.cluster(domain="hgx-h100", n_domains=2048, scale_out="quantum-2")
        self.par = training.Parallelism(**training.VALIDATION["llama3-405b-16k"]["parallelism"])

    def time_estimate_step(self):
        training.TrainingStep("llama3-405b", self.par, self.fabric, check_memory=False).estimate()


class DeepSeekV3EP64PP16H100:
    """A DeepSeek-V3-class step as DeepSeek laid it out (arXiv:2412.19437 section 3.2: PP 16,
    EP 64 across 8 nodes, ZeRO-1 data parallelism, no TP) on 2,048 H100 of 256 HGX boards
    with Quantum-2, at the start of its batch-size ramp (3,072 sequences of 4,096 tokens: 24
    micro-batches per pipeline), DeepEP dispatch in FP8: built and simulated at flow level."""

    timeout = 900
    number = 1
    repeat = (1, 3, 300.0)
    warmup_time = 0

    def setup(self):
        import warnings

        fabric = fs.cluster(domain="hgx-h100", n_domains=256, scale_out="quantum-2")
        par = training.Parallelism(pp=16, dp=128, ep=64, global_batch_size=3072, dp_sharding="zero1",
                                   stage_layers=(3,) + (4,) * 14 + (2,))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            self.step = training.TrainingStep("deepseek-v3", par, fabric, check_memory=False,
                                              moe=training.MoeOptions(dispatcher="deepep", fp8_dispatch=True))

    def time_step_flow_level(self):
        self.step.run()

    def peakmem_step_flow_level(self):
        self.step.run()


class ValidationRowEstimates:
    """Every training validation row's closed form, the dense and the MoE ones (its step built
    and estimated, the fabric built in setup): the target is under 50 ms a row."""

    params = list(training.VALIDATION) + list(training.MOE_VALIDATION)
    param_names = ["case"]
    number = 5
    repeat = (3, 10, 20.0)

    def setup(self, case):
        step = training.validation_step(case)
        self.args = (step.model, step.par, step.fabric)
        self.kwargs = dict(precision=step.precision, moe=step.moe, check_memory=False)

    def time_estimate(self, case):
        training.TrainingStep(*self.args, **self.kwargs).estimate()
