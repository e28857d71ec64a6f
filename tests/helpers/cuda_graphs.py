"""CUDA-graph capture for the tests: one warm-up call on a side stream (so that lazy set-up, such as
workspace allocations and shared-memory attributes, happens outside the capture), then the
capture of `step` on the current stream."""
from __future__ import annotations

import torch


def capture(step):
    """(graph, what step returned during the capture); replay the graph to run step again."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = step()
    return graph, result
