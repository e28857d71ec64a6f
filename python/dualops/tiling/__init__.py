"""Shared planners: pure functions (problem shape, DeviceProfile) -> plan data that packs to an
int32 tensor read by both the CUDA and the Ascend kernels."""

from .base import PackedPlan
from .incre_flash_attention import IfaPlan, ifa_footprint, ifa_capacity, plan_incre_flash_attention
from .mla_decode import MlaPlan, plan_mla_decode

__all__ = ["PackedPlan", "IfaPlan", "ifa_footprint", "ifa_capacity", "plan_incre_flash_attention",
           "MlaPlan", "plan_mla_decode"]
