"""GPU figures for the history's step lines: utilisation, memory, power, temperature.

On CUDA, every ``run.state_every`` steps the step line carries ``gpu_util`` (percent of
the last sample period a kernel ran), ``gpu_mem_used`` (bytes in use on the device, by
every process), ``gpu_power_w`` (watts) and ``gpu_temp_c`` (degrees Celsius) of the
trainer's device (rank 0's under torchrun). They are read through NVML (``pynvml``, from
the ``nvidia-ml-py`` package) by a :class:`GpuSampler` thread that polls every few
seconds; the training loop takes the latest values without waiting (an NVML call can take
milliseconds, and a stuck driver far longer). On CPU there is no sampler and no keys;
where NVML cannot be used, or a read fails, the loop says so once in ``trainer.log``
and trains on, with no keys (or only the ones that could be read).

The sampler reads through a *provider*: any object with the handful of ``pynvml``
functions below (:data:`NVML_FUNCTIONS`). The real one is the ``pynvml`` module; tests
pass their own.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

NVML_FUNCTIONS = ("nvmlInit", "nvmlShutdown", "nvmlDeviceGetHandleByUUID", "nvmlDeviceGetHandleByIndex",
                  "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetPowerUsage",
                  "nvmlDeviceGetTemperature")
NVML_TEMPERATURE_GPU = 0          # pynvml.NVML_TEMPERATURE_GPU: the GPU die's sensor
POLL_S = 2.0                      # between two samples
STALE_POLLS = 3                   # a sample older than this many periods is not reported (a stuck NVML call)


def _describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


def _readers(nvml: Any) -> dict[str, Callable[[Any], float | int]]:
    """Each figure's key and how it is read from a device handle."""
    return {
        "gpu_util": lambda h: int(nvml.nvmlDeviceGetUtilizationRates(h).gpu),
        "gpu_mem_used": lambda h: int(nvml.nvmlDeviceGetMemoryInfo(h).used),
        "gpu_power_w": lambda h: round(nvml.nvmlDeviceGetPowerUsage(h) / 1000.0, 1),     # NVML says milliwatts
        "gpu_temp_c": lambda h: int(nvml.nvmlDeviceGetTemperature(h, NVML_TEMPERATURE_GPU)),
    }


class GpuSampler:
    """A thread that samples one device's figures every ``interval`` seconds.

    ``latest()`` returns the newest complete sample (a dict, replaced whole, so the loop
    never sees half of one) and never waits; a sample older than ``stale_after`` seconds
    (:data:`STALE_POLLS` periods by default: an NVML call that hangs) is not returned, so
    old figures are never passed off as new. ``take_notice()`` returns, once each, what went
    wrong (NVML missing, a read that raised), for the loop to log: the thread itself writes
    nothing."""

    def __init__(self, provider: Any, uuid: str | None = None, index: int = 0, interval: float = POLL_S,
                 stale_after: float | None = None):
        self.provider = provider
        self.uuid, self.index, self.interval = uuid, index, interval
        self.stale_after = STALE_POLLS * interval if stale_after is None else stale_after
        self._latest: tuple[float, dict[str, float | int]] = (0.0, {})      # (when, sample): replaced whole
        self._notices: list[str] = []
        self._noticed: set[str] = set()           # the figures (or "nvml") already complained about
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="gpu-figures", daemon=True)
        self.samples = 0                          # complete polls, for tests and the bench

    def start(self) -> "GpuSampler":
        self._thread.start()
        return self

    def latest(self) -> dict[str, float | int]:
        sampled_at, sample = self._latest
        return sample if time.monotonic() - sampled_at <= self.stale_after else {}

    def take_notice(self) -> str | None:
        return self._notices.pop(0) if self._notices else None

    def _notice(self, what: str, message: str) -> None:
        if what not in self._noticed:
            self._noticed.add(what)
            self._notices.append(message)

    def _poll(self) -> None:
        nvml = self.provider
        try:
            nvml.nvmlInit()
            handle = nvml.nvmlDeviceGetHandleByUUID(self.uuid) if self.uuid else \
                nvml.nvmlDeviceGetHandleByIndex(self.index)
        except Exception as err:      # noqa: BLE001 - any failure of the library means no figures
            self._notice("nvml", f"GPU figures: NVML cannot be used ({_describe(err)}): step lines carry no gpu_* keys")
            return
        readers = _readers(nvml)
        try:
            while True:
                sample: dict[str, float | int] = {}
                for key, read in readers.items():
                    try:
                        sample[key] = read(handle)
                    except Exception as err:      # noqa: BLE001 - a figure that cannot be read is left out
                        self._notice(key, f"GPU figures: reading {key} failed ({_describe(err)}); it is left out "
                                          "of the step lines while it fails, and training goes on")
                self._latest = (time.monotonic(), sample)
                self.samples += 1
                if self._stop.wait(self.interval):
                    return
        finally:
            try:
                nvml.nvmlShutdown()
            except Exception:                     # noqa: BLE001 - nothing more to say at shutdown
                pass

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)       # a hung NVML call is left to the daemon thread


def sampler_for(device: Any) -> tuple[GpuSampler | None, str | None]:
    """The sampler of a CUDA ``device`` (a ``torch.device``), started; ``(None, why)`` when
    there can be none (``(None, None)`` on CPU: nothing to say)."""
    if device.type != "cuda":
        return None, None
    try:
        import pynvml
    except ImportError:
        return None, ("GPU figures: nvidia-ml-py is not installed (pip install nvidia-ml-py): step lines carry "
                      "no gpu_* keys")
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    uuid = None
    try:         # NVML numbers every GPU; CUDA only the visible ones (CUDA_VISIBLE_DEVICES): match by UUID
        uuid = f"GPU-{torch.cuda.get_device_properties(index).uuid}"
    except (AttributeError, RuntimeError):
        pass
    return GpuSampler(pynvml, uuid, index).start(), None
