"""A LoRA linear layer as peft's lora/layer.py computes it in eval mode (unmerged): the frozen
base layer plus dropout(x) @ A^T @ B^T times alpha / r, with the adapter's weights in a
ModuleDict keyed by adapter name; a model of two such layers around a GELU."""

import math

import torch
import torch.nn as nn


class LoraLinear(nn.Module):
    def __init__(self, in_features, out_features, r, lora_alpha, adapter_name="default"):
        super().__init__()
        self.base_layer = nn.Linear(in_features, out_features)
        self.lora_A = nn.ModuleDict({adapter_name: nn.Linear(in_features, r, bias=False)})
        self.lora_B = nn.ModuleDict({adapter_name: nn.Linear(r, out_features, bias=False)})
        self.lora_dropout = nn.ModuleDict({adapter_name: nn.Dropout(p=0.05)})
        self.scaling = {adapter_name: lora_alpha / r}
        self.active_adapters = [adapter_name]
        nn.init.kaiming_uniform_(self.lora_A[adapter_name].weight, a=math.sqrt(5))
        nn.init.normal_(self.lora_B[adapter_name].weight, std=0.02)

    def forward(self, x):
        result = self.base_layer(x)
        torch_result_dtype = result.dtype
        for active_adapter in self.active_adapters:
            if active_adapter not in self.lora_A.keys():
                continue
            lora_A = self.lora_A[active_adapter]
            lora_B = self.lora_B[active_adapter]
            dropout = self.lora_dropout[active_adapter]
            scaling = self.scaling[active_adapter]
            x = x.to(lora_A.weight.dtype)
            result = result + lora_B(lora_A(dropout(x))) * scaling
        result = result.to(torch_result_dtype)
        return result


class Model(nn.Module):
    def __init__(self, dim, hidden, r, alpha):
        super().__init__()
        self.fc1 = LoraLinear(dim, hidden, r, alpha)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = LoraLinear(hidden, dim, r, alpha)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


batch = 8
seq = 128
dim = 256
hidden = 1024
r = 8
alpha = 16


def get_inputs():
    return [torch.randn(batch, seq, dim)]


def get_init_inputs():
    return [dim, hidden, r, alpha]
