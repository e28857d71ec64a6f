"""Shared pieces of the planners: integer helpers, argument checks and int32 packing.

A plan packs to one int32 CPU tensor: its shared header (the fields named in the class's
`FIELDS`: the `header` of the op's plan contract, ops/<op>.yaml `plan:`, which `codegen` turns
into a C struct), for a backend with a struct that extends the header its fields next
(`BACKEND_FIELDS`, `pack(backend)`), then the plan's variable-length arrays, each flattened
row-major. `PackedPlan` implements pack / from_packed once.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any, ClassVar, Sequence

import torch

from ..devices import DeviceProfile, profile

INT32_MIN = -(2 ** 31)
INT32_MAX = 2 ** 31 - 1


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def round_up(a: int, b: int) -> int:
    return ceil_div(a, b) * b


def round_down(a: int, b: int) -> int:
    return (a // b) * b


def check_int(name: str, value: Any, *, min_value: int | None = None,
              max_value: int | None = None) -> int:
    """`value` as a Python int; TypeError if it is not an integer (bools refused), ValueError
    if out of [min_value, max_value]. Messages name the argument."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got bool {value!r}")
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.dtype.is_floating_point or value.dtype == torch.bool:
            raise TypeError(f"{name} must be an int, got a tensor of shape {tuple(value.shape)} "
                            f"and dtype {value.dtype}")
        value = int(value.item())
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}") from None
    if min_value is not None and value < min_value:
        raise ValueError(f"{name} must be >= {min_value}, got {value}")
    if max_value is not None and value > max_value:
        raise ValueError(f"{name} must be <= {max_value}, got {value}")
    return value


def check_choice(name: str, value: Any, choices: Sequence[Any]) -> Any:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def check_device(device: Any) -> DeviceProfile:
    """Planners take a DeviceProfile (or a profile name, for convenience)."""
    if isinstance(device, DeviceProfile):
        return device
    if isinstance(device, str):
        return profile(device)
    raise TypeError(f"device must be a DeviceProfile (see dualops.devices) or a profile name, "
                    f"got {type(device).__name__}")


def int_list(name: str, values: Any) -> list[int]:
    """A 1-D sequence of ints from a list/tuple, an integer tensor on any device, or a numpy
    array. Moves device tensors to the CPU (one sync, which is why plans are made once per step)."""
    if isinstance(values, torch.Tensor):
        if values.dim() != 1:
            raise ValueError(f"{name} must be 1-D, got shape {tuple(values.shape)}")
        if values.dtype.is_floating_point or values.dtype.is_complex or values.dtype == torch.bool:
            raise TypeError(f"{name} must hold integers, got dtype {values.dtype}")
        return [int(v) for v in values.detach().to("cpu", torch.int64).tolist()]
    if hasattr(values, "tolist") and hasattr(values, "ndim"):  # numpy without importing it
        if values.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {tuple(values.shape)}")
        values = values.tolist()
    if not isinstance(values, (list, tuple)):
        raise TypeError(f"{name} must be a list, tuple or 1-D integer tensor, "
                        f"got {type(values).__name__}")
    return [check_int(f"{name}[{i}]", v) for i, v in enumerate(values)]


@dataclasses.dataclass(frozen=True)
class PackedPlan:
    """Base of the plan dataclasses. Subclasses declare `FIELDS` (int32 header, in order, each
    also a dataclass field), `BACKEND_FIELDS` (backend -> the int32 fields its struct appends
    to the header, also dataclass fields), `VERSION`, and `ARRAYS`: (attribute, row width) pairs
    for the variable-length arrays that follow the header, stored as tuples of ints (row-major)
    and whose row counts `_array_rows` derives from the header."""

    FIELDS: ClassVar[tuple[str, ...]] = ()
    BACKEND_FIELDS: ClassVar[dict[str, tuple[str, ...]]] = {}
    VERSION: ClassVar[int] = 1
    ARRAYS: ClassVar[tuple[tuple[str, int], ...]] = ()

    def header(self) -> list[int]:
        return [int(getattr(self, f)) for f in self.FIELDS]

    def _array_rows(self, name: str) -> int:  # pragma: no cover - overridden when ARRAYS used
        raise NotImplementedError

    @classmethod
    def _header_names(cls, backend: str | None) -> tuple[str, ...]:
        """The header fields of `backend`'s packed plan: the shared ones, then the fields its
        struct appends (none for a backend without one, or for backend None)."""
        return cls.FIELDS + cls.BACKEND_FIELDS.get(backend, ())

    def pack(self, backend: str | None = None) -> torch.Tensor:
        """The packed plan as `backend` reads it (default: the shared header and arrays)."""
        names = self._header_names(backend)
        values = [int(getattr(self, f)) for f in names]
        for name, width in self.ARRAYS:
            arr = getattr(self, name)
            expect = self._array_rows(name) * width
            if len(arr) != expect:
                raise ValueError(f"{type(self).__name__}.{name} has {len(arr)} ints, "
                                 f"the header implies {expect}")
            values.extend(arr)
        for i, v in enumerate(values):
            if not INT32_MIN <= v <= INT32_MAX:
                where = names[i] if i < len(names) else f"array value {i}"
                raise ValueError(f"{type(self).__name__}: {where} = {v} does not fit in int32")
        return torch.tensor(values, dtype=torch.int32)

    @classmethod
    def from_packed(cls, t, backend: str | None = None):
        """Inverse of pack(backend): accepts the int32 tensor (any device) or a list of ints."""
        name = cls.__name__
        if isinstance(t, torch.Tensor):
            if t.dim() != 1 or t.dtype != torch.int32:
                raise ValueError(f"{name}.from_packed: expected a 1-D int32 tensor, got shape "
                                 f"{tuple(t.shape)} dtype {t.dtype}")
            values = t.detach().cpu().tolist()
        else:
            values = int_list("packed", t)
        names = cls._header_names(backend)
        nh = len(names)
        if len(values) < nh:
            raise ValueError(f"{name}.from_packed: need at least {nh} header ints, got {len(values)}")
        kwargs = dict(zip(names, values[:nh]))
        if kwargs.get("version", cls.VERSION) != cls.VERSION:
            raise ValueError(f"{name}.from_packed: plan version {kwargs['version']}, "
                             f"this code reads version {cls.VERSION}")
        pos = nh
        head = cls._from_header(kwargs)
        for arr_name, width in cls.ARRAYS:
            n = head._array_rows(arr_name) * width
            if pos + n > len(values):
                raise ValueError(f"{name}.from_packed: {arr_name} needs {n} ints, "
                                 f"only {len(values) - pos} left")
            kwargs[arr_name] = tuple(values[pos:pos + n])
            pos += n
        if pos != len(values):
            raise ValueError(f"{name}.from_packed: {len(values) - pos} trailing ints")
        return cls(**kwargs)

    @classmethod
    def _from_header(cls, header: dict):
        """An instance with empty arrays, so `_array_rows` can read header fields."""
        return cls(**header, **{a: () for a, _ in cls.ARRAYS})

    def header_dict(self) -> dict[str, int]:
        return {f: int(getattr(self, f)) for f in self.FIELDS}
