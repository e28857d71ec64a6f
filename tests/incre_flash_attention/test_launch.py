"""The CUDA IFA launch choices the planner puts into the plan are the ones the launcher used to
make itself at launch time.

``OldLauncher`` below is a line-by-line port of the decision code the C++ launcher
(backends/cuda/incre_flash_attention/ifa_launch.cuh) ran before the choices moved into the plan:
keyed on the GPU's DRAM bandwidth per SM (memory clock x bus width / SMs), with its
DUALOPS_IFA_* environment overrides as an explicit dict. It is the oracle: for a broad grid of
shapes on the H100 and H200 profiles, with and without overrides, the plan must name the same
kernel variant, q tile, merge, wave, stagger, second-fill keys and burst order.
No GPU needed.
"""
from __future__ import annotations

import itertools

import pytest

from dualops import devices, tuning
from dualops.heuristics import cuda as L
from dualops.tiling.incre_flash_attention import plan_incre_flash_attention

kNarrow, kWide, kWide1, kWideLs, kNarrowPf, kWidePf = range(6)
kMergeKernel, kMergeCounter, kMergeCluster = range(3)
INT8, FP8, BF16 = 3, 4, 2

# DRAM bandwidth per SM the old launcher read from the GPU (2 x memory clock x bus width / SMs):
# H100 SXM 2619 MHz x 5120 bit, H200 3201 MHz x 6144 bit, 132 SMs.
GBPS_PER_SM = {"h100": 2.0 * 2619e3 * 1e3 * 5120 / 8 / 1e9 / 132,
               "h200": 2.0 * 3201e3 * 1e3 * 6144 / 8 / 1e9 / 132}


class OldLauncher:
    """ifa_launch.cuh before launch choices became plan data (env overrides as a dict)."""

    def __init__(self, gbps_per_sm, sms=132, env=None, max_active_clusters=10**9, counters=True):
        self.gbps, self.sms, self.env = gbps_per_sm, sms, env or {}
        self.max_clusters, self.counters = max_active_clusters, counters

    def env_int(self, var, fallback):
        return int(self.env[var]) if var in self.env else fallback

    def shape_override(self):
        e = self.env.get("DUALOPS_IFA_CTA_SHAPE")
        return {"narrow": kNarrow, "wide": kWide}.get(e, -1)

    @staticmethod
    def unit_keys(t):
        return t.split_len if t.whole_groups == 0 and t.split_len < t.max_kv_len else t.max_kv_len

    def many_short_units(self, t, m):
        quant = t.kv_dtype_bytes == 1
        fast = self.gbps >= 30.0
        ctas = t.num_units * ((t.q_rows + m - 1) // m)
        unit_bytes = self.unit_keys(t) * t.head_dim * 2 * t.kv_dtype_bytes
        max_bytes = ((2 << 20) if fast else (256 << 10)) if quant else ((1 << 20) if fast and t.head_dim <= 128 else 0)
        return m == 16 and ctas >= 2 * self.sms and unit_bytes <= max_bytes

    def pick_shape(self, t, m):
        o = self.shape_override()
        if o >= 0:
            return o
        return kNarrow if self.many_short_units(t, m) else kWide

    def stagger_ns(self, shape, quant):
        v = self.env_int("DUALOPS_IFA_STAGGER_NS", -1)
        return v if v >= 0 else (8000 if shape == kNarrow and not quant else 0)

    def low_bw(self):
        return self.gbps < 30.0

    def second_fill_keys(self):
        return self.env_int("DUALOPS_IFA_SECOND_FILL_KEYS", 4096 if self.low_bw() else 0)

    def lockstep_keys(self, one_wave, quant):
        forced = self.env_int("DUALOPS_IFA_LOCKSTEP_KEYS", -1)
        if forced >= 0:
            return forced
        return (2048 if not one_wave else 4096 if quant else 1024) if self.low_bw() else 0

    def lockstep_burst_keys(self):
        return self.env_int("DUALOPS_IFA_LOCKSTEP_BURST_KEYS", 8192)

    def narrow_prefetch(self):
        return self.env_int("DUALOPS_IFA_NARROW_PREFETCH", 1 if self.low_bw() else 0) != 0

    def wide_prefetch(self, one_wave, keys, int8):
        forced = self.env_int("DUALOPS_IFA_WIDE_PREFETCH", -1)
        if forced >= 0:
            return forced != 0
        if not one_wave or self.shape_override() >= 0:
            return False
        if self.low_bw():
            return keys >= 1024
        return keys >= (4096 if int8 else 2048) and keys <= 16384

    def merge_override(self):
        return {"kernel": kMergeKernel, "counter": kMergeCounter, "cluster": kMergeCluster}.get(
            self.env.get("DUALOPS_IFA_MERGE"), -1)

    def pdl(self):
        return self.env.get("DUALOPS_IFA_PDL") != "0"

    # Cfg / SmemLayout / ClusterMergeLayout of ifa_config.cuh / ifa_split_kernel.cuh
    @staticmethod
    def cfg(d, kvb, shape):
        quant = kvb == 1
        narrow = shape in (kNarrow, kNarrowPf)
        warps = 4 if narrow else (4 if (not quant and d == 256) else 8)
        stage_bytes = 2 * 16 * d * kvb
        budget = ((96 if quant else 105) if narrow else (200 if quant else 210)) * 1024
        fit = budget // (warps * stage_bytes)
        stages = 2 if fit < 2 else (8 if fit > 8 else fit)
        sub = 1 if shape == kWide1 or stages < 6 else 2
        return dict(quant=quant, warps=warps, stages=stages, sub=sub, ctas=2 if narrow else 1,
                    kv=warps * stages * stage_bytes)

    def cluster_fits(self, d, kvb, m, shape):
        c = self.cfg(d, kvb, shape)
        staged = c["quant"]
        pitch = d + 4 if staged else d
        out = c["warps"] * m * d * 4
        lse = out + m * pitch * 4
        return lse + m * 4 <= c["kv"]

    def has_variant(self, d, kvb, m, shape):
        w = self.cfg(d, kvb, kWide)
        if shape == kWide1:
            return m <= 32 and w["sub"] > 1
        if shape == kWideLs:
            return w["quant"] or w["sub"] == 1
        if shape in (kNarrowPf, kWidePf):
            return w["quant"]
        return True

    def pick_variant(self, t, m, int8):
        d, kvb = t.head_dim, t.kv_dtype_bytes
        shape = self.pick_shape(t, m)
        if self.has_variant(d, kvb, m, kNarrowPf) and shape == kNarrow and self.narrow_prefetch():
            return kNarrowPf
        if self.has_variant(d, kvb, m, kWide1):
            if shape == kWide and self.shape_override() < 0 and self.unit_keys(t) <= self.cfg(d, kvb, kWide)["warps"] * 16:
                return kWide1
        one_wave = t.num_units * ((t.q_rows + m - 1) // m) <= self.sms
        if self.has_variant(d, kvb, m, kWideLs):
            mk = self.lockstep_keys(one_wave, kvb == 1)
            if shape == kWide and self.shape_override() < 0 and mk > 0 and self.unit_keys(t) >= mk:
                return kWideLs
        if self.has_variant(d, kvb, m, kWidePf):
            if shape == kWide and self.wide_prefetch(one_wave, self.unit_keys(t), int8):
                return kWidePf
        return shape

    def merge_mode(self, t, m, shape):
        if t.num_splits == 1:
            return kMergeKernel
        o = self.merge_override()
        if o == kMergeKernel:
            return kMergeKernel
        # (plus a rule the old launcher lacked: each CTA's slice of the merge, a slot per thread)
        rows_ = t.q_rows if t.q_rows < m else m
        slice_ok = -(-rows_ * (t.head_dim // 4) // t.num_splits) <= 32 * self.cfg(t.head_dim, t.kv_dtype_bytes, shape)["warps"]
        if (o != kMergeCounter and self.cluster_fits(t.head_dim, t.kv_dtype_bytes, m, shape)
                and t.num_splits <= 8 and t.whole_groups == 0 and slice_ok):
            clusters = t.batch * t.h_kv * ((t.q_rows + m - 1) // m)
            if clusters <= self.max_clusters:
                return kMergeCluster
        tiles = (t.q_rows + m - 1) // m
        rows = t.q_rows if t.q_rows < m else m
        if self.counters and t.batch * t.h_kv * tiles <= (1 << 16) and t.num_splits * rows * t.head_dim * 4 <= 128 * 1024:
            return kMergeCounter
        return kMergeKernel

    def launch(self, t, int8):
        """What launch_head_dim / launch_variant passed to the kernels."""
        d = t.head_dim
        m = min(16 if t.q_rows <= 16 else 32 if t.q_rows <= 32 else 64, 4096 // d)
        shape = self.pick_variant(t, m, int8)
        mode = self.merge_mode(t, m, shape)
        c = self.cfg(d, t.kv_dtype_bytes, shape)
        wave = self.sms * c["ctas"]
        waves = t.num_units * ((t.q_rows + m - 1) // m) > wave
        stagger = self.stagger_ns(shape, c["quant"]) if waves else 0
        bk = self.lockstep_burst_keys()
        burst = int(shape == kWideLs and t.block_size == 0 and bk > 0 and self.unit_keys(t) >= bk)
        return dict(m=m, variant=shape, merge=mode, pdl=self.pdl(), wave=wave, stagger=stagger,
                    fill2=self.second_fill_keys(), burst=burst)


def new_launch(plan, max_active_clusters=10**9, counters=True):
    """What the new launcher passes: the plan's fields, the merge resolved as merge_mode does."""
    m = plan.cta_m_tile
    mode = plan.merge
    if mode == kMergeCluster and plan.batch * plan.h_kv * (-(-plan.q_rows // m)) > max_active_clusters:
        mode = plan.merge_fallback
    if mode == kMergeCounter and not counters:
        mode = kMergeKernel
    return dict(m=m, variant=plan.variant, merge=mode, pdl=bool(plan.pdl), wave=plan.wave_ctas,
                stagger=plan.stagger_ns, fill2=plan.second_fill_keys, burst=plan.lockstep_burst)


# The env overrides of the old launcher and the tuning knobs that replace them.
OVERRIDES = [
    ({}, {}),
    ({"DUALOPS_IFA_CTA_SHAPE": "narrow"}, {"ifa_cta_shape": "narrow"}),
    ({"DUALOPS_IFA_CTA_SHAPE": "wide"}, {"ifa_cta_shape": "wide"}),
    ({"DUALOPS_IFA_CTA_SHAPE": "wide", "DUALOPS_IFA_WIDE_PREFETCH": "1", "DUALOPS_IFA_NARROW_PREFETCH": "1"},
     {"ifa_cta_shape": "wide", "ifa_wide_prefetch": True, "ifa_narrow_prefetch": True}),
    ({"DUALOPS_IFA_CTA_SHAPE": "narrow", "DUALOPS_IFA_NARROW_PREFETCH": "0"},
     {"ifa_cta_shape": "narrow", "ifa_narrow_prefetch": False}),
    ({"DUALOPS_IFA_WIDE_PREFETCH": "0"}, {"ifa_wide_prefetch": False}),
    ({"DUALOPS_IFA_MERGE": "kernel"}, {"ifa_merge": "kernel"}),
    ({"DUALOPS_IFA_MERGE": "counter"}, {"ifa_merge": "counter"}),
    ({"DUALOPS_IFA_MERGE": "cluster"}, {"ifa_merge": "cluster"}),
    ({"DUALOPS_IFA_PDL": "0"}, {"ifa_pdl": False}),
    ({"DUALOPS_IFA_STAGGER_NS": "0"}, {"ifa_stagger_ns": 0}),
    ({"DUALOPS_IFA_STAGGER_NS": "4000"}, {"ifa_stagger_ns": 4000}),
    ({"DUALOPS_IFA_SECOND_FILL_KEYS": "512"}, {"ifa_second_fill_keys": 512}),
    ({"DUALOPS_IFA_SECOND_FILL_KEYS": "0"}, {"ifa_second_fill_keys": 0}),
    ({"DUALOPS_IFA_LOCKSTEP_KEYS": "16", "DUALOPS_IFA_LOCKSTEP_BURST_KEYS": "0"},
     {"ifa_lockstep_keys": 16, "ifa_lockstep_burst_keys": 0}),
    ({"DUALOPS_IFA_LOCKSTEP_KEYS": "16", "DUALOPS_IFA_LOCKSTEP_BURST_KEYS": "16"},
     {"ifa_lockstep_keys": 16, "ifa_lockstep_burst_keys": 16}),
    ({"DUALOPS_IFA_LOCKSTEP_KEYS": "0"}, {"ifa_lockstep_keys": 0}),
]

# (batch, h_q, h_kv, s_q, head_dim, max_kv_len, block_size)
SHAPES = [(b, hq, hkv, sq, d, s, bs)
          for b, (hq, hkv), sq, d, s, bs in itertools.product(
              (1, 2, 16, 48, 128, 256),
              ((8, 1), (32, 8), (64, 8), (32, 32), (128, 128), (64, 1)),
              (1, 2, 4),
              (64, 128, 256),
              (1, 100, 128, 256, 1024, 2048, 4096, 8192, 16384, 32768, 131072),
              (0, 64))]
DTYPES = [(2, BF16), (1, INT8), (1, FP8)]


def _cases(step):
    # every shape once per profile and dtype at the default; a thinned grid under each override
    return SHAPES[::step]


@pytest.mark.parametrize("dev", ["h100", "h200"])
def test_profiles_carry_the_old_bandwidth_rule(dev):
    p = devices.profile(dev)
    old = OldLauncher(GBPS_PER_SM[dev])
    assert (p.ifa_cuda == devices.ifa_cuda_rules(GBPS_PER_SM[dev]))
    assert p.ifa_cuda.narrow_prefetch == old.narrow_prefetch()
    assert p.ifa_cuda.second_fill_keys == old.second_fill_keys()


def _compare(dev, shapes, env, knobs, **resolve):
    profile = devices.profile(dev)
    old = OldLauncher(GBPS_PER_SM[dev], env=env, **resolve)
    n = 0
    with tuning.override(**knobs):
        for (b, hq, hkv, sq, d, s, bs), (kvb, code) in itertools.product(shapes, DTYPES):
            if bs and s % bs:
                continue
            plan = plan_incre_flash_attention(batch=b, s_q=sq, h_q=hq, h_kv=hkv, head_dim=d, max_kv_len=s,
                                              block_size=bs, kv_dtype_bytes=kvb, kv_dtype=code, device=profile)
            plans = [plan]
            if plan.num_splits == 1 and s >= 256:  # forced splits as tests and measurements make them
                plans += [plan.with_splits(4), plan.with_splits(8), plan.with_splits(64)]
            for p in plans:
                want = old.launch(p, int8=code == INT8)
                got = new_launch(p, **resolve)
                assert got == want, (dev, env, p.describe(), got, want)
                n += 1
    return n


@pytest.mark.parametrize("dev", ["h100", "h200"])
def test_default_launch_matches_the_old_launcher(dev):
    assert _compare(dev, SHAPES, {}, {}) > 5000


@pytest.mark.parametrize("dev", ["h100", "h200"])
@pytest.mark.parametrize("resolve", [dict(max_active_clusters=0), dict(max_active_clusters=16),
                                     dict(counters=False)], ids=["no-clusters", "16-clusters", "no-counters"])
def test_merge_fallbacks_match_the_old_launcher(dev, resolve):
    _compare(dev, SHAPES[::9], {}, {}, **resolve)


@pytest.mark.parametrize("dev", ["h100", "h200"])
@pytest.mark.parametrize("env,knobs", OVERRIDES[1:], ids=[",".join(f"{k[12:]}={v}" for k, v in e.items())
                                                          for e, _ in OVERRIDES[1:]])
def test_overridden_launch_matches_the_old_launcher(dev, env, knobs):
    _compare(dev, SHAPES[::13], env, knobs)


def test_every_planned_variant_is_built():
    for (b, hq, hkv, sq, d, s, bs), (kvb, code) in itertools.product(SHAPES[::3], DTYPES):
        for dev in ("h100", "h200"):
            p = plan_incre_flash_attention(batch=b, s_q=sq, h_q=hq, h_kv=hkv, head_dim=d, max_kv_len=s,
                                           block_size=bs, kv_dtype_bytes=kvb, kv_dtype=code,
                                           device=devices.profile(dev))
            assert L.has_variant(p.variant, d, kvb, p.cta_m_tile), p.describe()


def test_override_scopes_plans_and_checks_knobs():
    kw = dict(batch=1, s_q=1, h_q=8, h_kv=1, head_dim=128, max_kv_len=8192, device=devices.H100)
    base = plan_incre_flash_attention(**kw)
    with tuning.override(ifa_merge="kernel", ifa_cta_shape="narrow", ifa_pdl=False):
        forced = plan_incre_flash_attention(**kw)
        assert (forced.variant, forced.merge, forced.pdl) == (L.NARROW, L.MERGE_KERNEL, 0)
        assert "narrow kernel" in forced.describe() and "no PDL" in forced.describe()
    assert plan_incre_flash_attention(**kw) == base
    with pytest.raises(ValueError, match="ifa_merge"):
        with tuning.override(ifa_merge="fast"):
            pass
    with pytest.raises(ValueError, match="unknown knob"):
        with tuning.override(ifa_nope=1):
            pass


def test_ascend_plans_carry_no_cuda_launch():
    p = plan_incre_flash_attention(batch=1, s_q=1, h_q=8, h_kv=1, head_dim=128, max_kv_len=8192,
                                   device=devices.profile("ascend910b2"))
    assert p.wave_ctas == 0 and "cuda:" not in p.describe()
