import kwrt
import torch
import torch.nn as nn

lib = kwrt.load()


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        lib.softmax_inplace_copy(x, out, x.shape[0], x.shape[1])
        return out
