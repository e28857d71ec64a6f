"""Which backend runs a call: by the tensors' device, or by name."""
from __future__ import annotations

from . import backends, schema

# Device type -> default backend.
_BY_DEVICE = {"cuda": "cuda", "npu": "npu", "privateuseone": "npu", "cpu": "reference"}
# Backend -> device types its tensors must live on (None = any).
_DEVICES = {"reference": None, "cuda": ("cuda",), "ascend_sim": ("cpu",), "npu": ("npu", "privateuseone")}


def select(op: str, backend: str | None, device, features: dict) -> str:
    """Resolve ``backend`` (None or "" = by device), check it is usable here and supports the
    variant. Raises ValueError (unknown name / wrong device), RuntimeError (not available here,
    with the reason) or NotImplementedError (variant not supported, naming op and backend)."""
    if device.type == "meta":
        raise ValueError(
            f"{op}: the tensors are meta tensors, which hold no data: an eager call needs real tensors "
            f"(backend {backend or 'by device'!r}); meta / fake tensors run only under torch.compile or "
            f"torch._subclasses.FakeTensorMode, where torch.ops.dualops.{op}'s fake implementation "
            f"gives the output shapes")
    if not backend:
        backend = _BY_DEVICE.get(device.type)
        if backend is None:
            raise ValueError(f"{op}: no backend for tensors on {device}; pass backend= one of {backends.NAMES}")
    elif backend not in backends.NAMES:
        raise ValueError(f"{op}: backend must be one of {backends.NAMES}, got {backend!r}")
    allowed = _DEVICES[backend]
    if allowed is not None and device.type not in allowed:
        raise ValueError(f"{op}: backend {backend!r} needs tensors on {'/'.join(allowed)}, got {device}")
    reason = schema.support_reason(op, backend, **features)
    if reason is not None:
        raise NotImplementedError(reason)
    ok, why = backends.status(backend)
    if not ok:
        raise RuntimeError(f"{op}: backend {backend!r} is not available here: {why}")
    return backend
