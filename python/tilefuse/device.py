"""Where kernels run: :class:`Device` (a wgpu adapter, or the CPU), what
any device is (:class:`DeviceFacts`, also a remote tuning worker's), and
:func:`as_device`, what every ``device`` argument goes through."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from typing import Any, Literal, TypeAlias, TypeVar, overload

from . import _native

__all__ = ["DEVICE_NAMES", "Device", "DeviceFacts", "DeviceName", "as_device"]


class DeviceFacts:
    """What a device is, read from its :attr:`info`: a :class:`Device`, or
    a remote tuning worker's device as the driver sees it."""

    __slots__ = ()

    @property
    def info(self) -> dict[str, Any]:
        raise NotImplementedError

    @property
    def is_gpu(self) -> bool:
        return bool(self.info["backend"] != "cpu")

    @property
    def fingerprint(self) -> str:
        """16 hex digits naming this device as results and params files
        record it: adapter, driver, limits, features and (on the CPU)
        threads. Timings are comparable only under one fingerprint."""
        text = json.dumps(self.info, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


class Device(DeviceFacts):
    """Where kernels run: a wgpu adapter, or the CPU. ``Device("cpu")``,
    ``Device("gpu")`` and ``Device("default")`` open one by name, as
    :func:`as_device` does."""

    __slots__ = ("_native",)

    def __init__(self, native: _native.Device | DeviceName) -> None:
        if isinstance(native, str):
            self._native: _native.Device = as_device(native)._native
        elif isinstance(native, _native.Device):
            self._native = native
        else:
            raise TypeError(
                f"Device(): expected one of {', '.join(map(repr, DEVICE_NAMES))}, "
                f"got {type(native).__name__}"
            )

    @classmethod
    def default(cls) -> Device:
        """The GPU when wgpu finds an adapter, else the CPU;
        ``TILEFUSE_DEVICE=gpu|cpu`` forces one."""
        _runtime_dir()
        return cls(_native.Device.default())

    @classmethod
    def cpu(cls) -> Device:
        return cls(_native.Device.cpu())

    @classmethod
    def gpu(cls) -> Device:
        """The best wgpu adapter; ``DeviceError`` when there is none."""
        _runtime_dir()
        return cls(_native.Device.gpu())

    @property
    def info(self) -> dict[str, Any]:
        return self._native.info

    def __repr__(self) -> str:
        return repr(self._native)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickles as its kind; unpickling opens that kind of device here.
        return (Device.gpu if self.is_gpu else Device.cpu, ())


#: The names a ``device`` argument takes, as the CLI's ``--device``.
DeviceName: TypeAlias = Literal["cpu", "gpu", "default"]
DEVICE_NAMES = {"cpu": Device.cpu, "gpu": Device.gpu, "default": Device.default}

_D = TypeVar("_D", bound=DeviceFacts)


@overload
def as_device(device: _D) -> _D: ...


@overload
def as_device(device: str | None) -> Device: ...


def as_device(device: DeviceFacts | str | None) -> DeviceFacts:
    """What every ``device`` argument takes: a :class:`Device` (or another
    :class:`DeviceFacts`) as it is, ``"cpu"``, ``"gpu"`` or ``"default"``
    opened (a GPU is opened once per process), and ``None`` as
    ``"default"``."""
    if device is None:
        return Device.default()
    if isinstance(device, DeviceFacts):
        return device
    expected = ", ".join(map(repr, DEVICE_NAMES)) + " or a tilefuse.Device"
    if not isinstance(device, str):
        raise TypeError(f"device: expected {expected}, got {type(device).__name__}")
    if device not in DEVICE_NAMES:
        raise ValueError(f"device: unknown device {device!r}; expected {expected}")
    return DEVICE_NAMES[device]()


def _runtime_dir() -> None:
    """Mesa's Vulkan drivers print "XDG_RUNTIME_DIR is invalid or not set"
    on every device they open without it, which users take for a failure:
    give them a private directory when the variable is unset."""
    if not os.environ.get("XDG_RUNTIME_DIR"):
        os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="tilefuse-runtime-")
