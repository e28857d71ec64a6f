"""Shared planners: pure functions (problem shape, DeviceProfile) -> plan data that packs to an
int32 tensor read by both the CUDA and the Ascend kernels."""

from .base import PackedPlan
from .grouped_gemm import GroupedGemmPlan, plan_grouped_gemm, plan_grouped_gemm_masked
from .incre_flash_attention import IfaPlan, ifa_capacity, ifa_footprint, plan_incre_flash_attention
from .mla_decode import MlaPlan, plan_mla_decode

PLAN_CLASSES = (IfaPlan, MlaPlan, GroupedGemmPlan)

__all__ = ["PackedPlan", "PLAN_CLASSES",
           "IfaPlan", "plan_incre_flash_attention", "ifa_footprint", "ifa_capacity",
           "MlaPlan", "plan_mla_decode",
           "GroupedGemmPlan", "plan_grouped_gemm", "plan_grouped_gemm_masked"]
