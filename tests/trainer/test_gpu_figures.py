"""The GPU figures of the step lines, on CPU through a stand-in NVML provider (no GPU runs
the tests): read on the sampler's thread, taken by the loop every ``state_every`` steps,
and a provider that fails is said once in trainer.log while training goes on."""

from __future__ import annotations

import io
import threading
from types import SimpleNamespace

import pytest
import torch

from rundir import load_run_config
from rundir.signals import SignalFlags
from tests.trainer.trainer_runs import step_lines, wait_for
from trainer.data import ArmData
from trainer.determinism import configure
from trainer.gpu_figures import NVML_FUNCTIONS, NVML_TEMPERATURE_GPU, GpuSampler, sampler_for
from trainer.outputs import RunOutputs
from trainer.progress import Progress
from trainer.resume import build_state
from trainer.train import train

GPU_KEYS = {"gpu_util", "gpu_mem_used", "gpu_power_w", "gpu_temp_c"}


class FakeNvml:
    """The pynvml functions the sampler calls, with fixed figures; ``fail`` names the
    functions that raise (as pynvml's NVMLError does), and every call's thread is kept."""

    def __init__(self, fail: tuple[str, ...] = ()):
        self.fail = fail
        self.threads: set[int] = set()
        self.shut_down = False

    def _call(self, name: str) -> None:
        self.threads.add(threading.get_ident())
        if name in self.fail:
            raise RuntimeError(f"{name}: Not Supported")

    def nvmlInit(self):
        self._call("nvmlInit")

    def nvmlShutdown(self):
        self.shut_down = True

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self._call("nvmlDeviceGetHandleByUUID")
        return ("uuid", uuid)

    def nvmlDeviceGetHandleByIndex(self, index):
        self._call("nvmlDeviceGetHandleByIndex")
        return ("index", index)

    def nvmlDeviceGetUtilizationRates(self, handle):
        self._call("nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=87, memory=40)

    def nvmlDeviceGetMemoryInfo(self, handle):
        self._call("nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(total=80 * 2**30, used=12 * 2**30, free=68 * 2**30)

    def nvmlDeviceGetPowerUsage(self, handle):
        self._call("nvmlDeviceGetPowerUsage")
        return 312_456                       # milliwatts

    def nvmlDeviceGetTemperature(self, handle, sensor):
        self._call("nvmlDeviceGetTemperature")
        assert sensor == 0                   # NVML_TEMPERATURE_GPU
        return 64


def test_the_fake_has_every_function_the_sampler_calls_and_so_has_pynvml():
    import pynvml  # nvidia-ml-py, in the train extra: importable without a GPU

    for provider in (FakeNvml(), pynvml):
        assert all(callable(getattr(provider, name)) for name in NVML_FUNCTIONS)
    assert pynvml.NVML_TEMPERATURE_GPU == NVML_TEMPERATURE_GPU


def test_no_sampler_and_nothing_to_say_on_cpu():
    assert sampler_for(torch.device("cpu")) == (None, None)


def test_the_sampler_reads_on_its_own_thread_and_converts_units():
    nvml = FakeNvml()
    sampler = GpuSampler(nvml, uuid="GPU-1234", interval=0.01, stale_after=300).start()
    try:
        wait_for(lambda: sampler.samples >= 3, what="three samples")
        assert sampler.latest() == {"gpu_util": 87, "gpu_mem_used": 12 * 2**30, "gpu_power_w": 312.5,
                                    "gpu_temp_c": 64}
        assert sampler.take_notice() is None
    finally:
        sampler.close()
    assert threading.get_ident() not in nvml.threads and nvml.shut_down


class HangingNvml(FakeNvml):
    """Reads once, then every read hangs until released (a stuck driver call)."""

    def __init__(self):
        super().__init__()
        self.release = threading.Event()
        self.reads = 0

    def nvmlDeviceGetUtilizationRates(self, handle):
        self.reads += 1
        if self.reads > 1:
            self.release.wait(timeout=60)
        return super().nvmlDeviceGetUtilizationRates(handle)


def test_a_sample_that_is_not_renewed_is_not_reported():
    nvml = HangingNvml()
    sampler = GpuSampler(nvml, interval=0.05).start()
    try:
        wait_for(lambda: sampler.samples == 1 and nvml.reads == 2, what="the second read to hang")
        wait_for(lambda: sampler.latest() == {}, what="the first sample to go stale")
        nvml.release.set()
        wait_for(lambda: sampler.latest().get("gpu_util") == 87, what="a new sample")
    finally:
        nvml.release.set()
        sampler.close()


def _train_with(run_dir, gpu: GpuSampler, steps: int = 20) -> str:
    configure(threads=1)
    config = load_run_config(run_dir)
    arms = {n: ArmData.load(n, a.source, run_dir, config.model.block_size) for n, a in config.arms.items()}
    state = build_state(config, arms, torch.device("cpu"), None)
    progress = Progress(run_dir, config.run.log_every, stream=io.StringIO())
    out = RunOutputs(run_dir, progress, config.samples.keep, 0)
    try:
        with SignalFlags() as flags:
            return train(state, out, flags, stop_at=steps, gpu=gpu)
    finally:
        out.close()
        progress.close()


def test_step_lines_carry_the_figures_every_state_every_steps(trainer_run):
    run = trainer_run("gpu", state_every=5, checkpoint_every=100)
    nvml = FakeNvml()
    # Sampled often, and never stale here: a loaded machine may hold this process longer than 3 periods.
    sampler = GpuSampler(nvml, index=0, interval=0.01, stale_after=300).start()
    wait_for(lambda: sampler.samples >= 1, what="a first sample")
    assert _train_with(run, sampler) == "max_steps"
    lines = step_lines(run)
    assert [s["step"] for s in lines if GPU_KEYS <= set(s)] == [5, 10, 15, 20]
    assert not any(GPU_KEYS & set(s) for s in lines if s["step"] % 5)
    assert lines[4]["gpu_power_w"] == 312.5 and lines[4]["gpu_mem_used"] == 12 * 2**30
    assert threading.get_ident() not in nvml.threads       # the loop never called NVML
    assert nvml.shut_down                                  # closed with the loop


@pytest.mark.parametrize("fail, kept", [
    (("nvmlInit",), set()),                                  # NVML unusable: no figures at all
    (("nvmlDeviceGetPowerUsage",), GPU_KEYS - {"gpu_power_w"}),   # one figure the device does not have
])
def test_a_failing_provider_is_said_once_and_training_goes_on(trainer_run, fail, kept):
    run = trainer_run("failing", state_every=2, checkpoint_every=100)
    sampler = GpuSampler(FakeNvml(fail), interval=0.01, stale_after=300).start()
    wait_for(lambda: sampler.samples >= 3 or sampler._thread.is_alive() is False, what="the sampler's attempts")
    assert _train_with(run, sampler) == "max_steps"
    lines = step_lines(run)
    assert [s["step"] for s in lines] == list(range(1, 21))
    assert all(set(s) & GPU_KEYS == (kept if s["step"] % 2 == 0 else set()) for s in lines)
    log = (run / "trainer.log").read_text()
    assert log.count("GPU figures:") == 1 and fail[0] in log and "Not Supported" in log
