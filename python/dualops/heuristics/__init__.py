"""Launch heuristics, one module per backend (docs/internals.md "Plan contract"): ``cuda`` and
``ascend`` hold every launch choice a backend makes from the device profile beyond the shared,
shape-only planning of ``dualops.tiling``. Planners and backend modules call them; the kernels
read the result from the plan or params structs and decide nothing themselves."""
