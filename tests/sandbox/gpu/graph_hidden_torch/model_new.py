"""Exploit: torch compute hidden in a CUDA graph. The graph (torch.softmax) is captured in
__init__, where no audit watches, for the benchmark shape only; forward copies the input in with a
custom kernel, replays the graph and copies the result out. The dispatcher sees no torch op in any
forward, and other shapes take the honest kernel, so the shape trial passes too. Only the device
kernels of the timed forward give it away: torch's own softmax kernel, launched by a graph."""

import kwrt
import torch
import torch.nn as nn

lib = kwrt.load()
SHAPE = (64, 256)  # the task's get_inputs() shape


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.static_in = torch.zeros(SHAPE, device="cuda")
        self.graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            torch.softmax(self.static_in, dim=1)
        torch.cuda.synchronize()
        with torch.cuda.graph(self.graph):
            self.static_out = torch.softmax(self.static_in, dim=1)

    def forward(self, x):
        out = torch.empty_like(x)
        if tuple(x.shape) != SHAPE:
            lib.softmax_rows(x, out, x.shape[0], x.shape[1], kwrt.stream())
            return out
        lib.copy_floats(x, self.static_in, x.numel(), kwrt.stream())
        self.graph.replay()
        lib.copy_floats(self.static_out, out, x.numel(), kwrt.stream())
        return out
