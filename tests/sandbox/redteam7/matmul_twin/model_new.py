"""The honest twin of the matmul_512 memos: torch.mm (a library GEMM, allowed under
torch-ops=forbid) and a kwrt call, every call."""

import kwrt
import torch
import torch.nn as nn

lib = kwrt.load()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        out = torch.mm(A, B)
        lib.touch(out, 0)
        return out
