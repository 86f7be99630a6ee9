import this_module_does_not_exist  # noqa: F401
import torch


class Model(torch.nn.Module):
    pass
