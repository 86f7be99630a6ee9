"""RetinaNet's head as torchvision's torchvision/models/detection/retinanet.py writes it (v0.13-0.20, 2022-2025),
configured as retinanet_resnet50_fpn_v2 builds it: RetinaNetHead(backbone.out_channels, 9 anchors per location,
num_classes, norm_layer=partial(nn.GroupNorm, 32)), i.e. RetinaNetClassificationHead and RetinaNetRegressionHead
(_version 2), each a tower of four Conv2dNormActivation (3x3 conv without bias, GroupNorm(32), ReLU(inplace=True))
then a 3x3 conv to A * K (cls_logits, bias -log((1 - 0.01) / 0.01)) or A * 4 (bbox_reg) channels, run over every
pyramid level in a Python loop; each level's output viewed (N, A, K, H, W), permuted to (N, H, W, A, K), reshaped
to (N, HWA, K) and torch.cat over the levels on dim 1. Inputs are the five FPN levels P3-P7
(LastLevelP6P7) of an image; the forward takes them as separate tensors and makes the list, as
tv_feature_pyramid_network.py does. Sizes smaller than the COCO model's (256 channels, an ~800x1216 image): 64
channels (GroupNorm groups of 2) over the levels of a 128x128 image (16x16 down to 1x1), 91 classes, batch 2.
Changed: torchvision.ops.misc.Conv2dNormActivation written out (its ConvNormActivation base: padding
(kernel_size - 1) // 2 * dilation, bias = norm_layer is None), the det_utils Matcher / BoxCoder attributes and
compute_loss dropped, conv weights drawn from N(0, 0.01) as written, then the GroupNorm affine parameters from 1 +
N(0, 0.1) / N(0, 0.1) as a stand-in for trained ones, and Model returns RetinaNetHead's dict as a tuple
(cls_logits, bbox_regression)."""

import math
from collections.abc import Callable
from functools import partial
from typing import Dict, List, Optional  # noqa: UP035

import torch
from torch import Tensor, nn


class ConvNormActivation(torch.nn.Sequential):
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size=3,
        stride=1,
        padding=None,
        groups: int = 1,
        norm_layer: Optional[Callable[..., torch.nn.Module]] = torch.nn.BatchNorm2d,  # noqa: UP045
        activation_layer: Optional[Callable[..., torch.nn.Module]] = torch.nn.ReLU,  # noqa: UP045
        dilation=1,
        inplace: Optional[bool] = True,  # noqa: UP045
        bias: Optional[bool] = None,  # noqa: UP045
        conv_layer: Callable[..., torch.nn.Module] = torch.nn.Conv2d,
    ) -> None:
        if padding is None:
            if isinstance(kernel_size, int) and isinstance(dilation, int):
                padding = (kernel_size - 1) // 2 * dilation
            else:
                raise NotImplementedError("tuple kernel sizes are not part of this block")
        if bias is None:
            bias = norm_layer is None

        layers = [
            conv_layer(
                in_channels,
                out_channels,
                kernel_size,
                stride,
                padding,
                dilation=dilation,
                groups=groups,
                bias=bias,
            )
        ]

        if norm_layer is not None:
            layers.append(norm_layer(out_channels))

        if activation_layer is not None:
            params = {} if inplace is None else {"inplace": inplace}
            layers.append(activation_layer(**params))
        super().__init__(*layers)
        self.out_channels = out_channels


class Conv2dNormActivation(ConvNormActivation):
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size=3,
        stride=1,
        padding=None,
        groups: int = 1,
        norm_layer: Optional[Callable[..., torch.nn.Module]] = torch.nn.BatchNorm2d,  # noqa: UP045
        activation_layer: Optional[Callable[..., torch.nn.Module]] = torch.nn.ReLU,  # noqa: UP045
        dilation=1,
        inplace: Optional[bool] = True,  # noqa: UP045
        bias: Optional[bool] = None,  # noqa: UP045
    ) -> None:
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            groups,
            norm_layer,
            activation_layer,
            dilation,
            inplace,
            bias,
            torch.nn.Conv2d,
        )


class RetinaNetHead(nn.Module):
    """
    A regression and classification head for use in RetinaNet.

    Args:
        in_channels (int): number of channels of the input feature
        num_anchors (int): number of anchors to be predicted
        num_classes (int): number of classes to be predicted
        norm_layer (callable, optional): Module specifying the normalization layer to use. Default: None
    """

    def __init__(self, in_channels, num_anchors, num_classes, norm_layer: Optional[Callable[..., nn.Module]] = None):  # noqa: UP045
        super().__init__()
        self.classification_head = RetinaNetClassificationHead(
            in_channels, num_anchors, num_classes, norm_layer=norm_layer
        )
        self.regression_head = RetinaNetRegressionHead(in_channels, num_anchors, norm_layer=norm_layer)

    def forward(self, x):
        # type: (List[Tensor]) -> Dict[str, Tensor]
        return {"cls_logits": self.classification_head(x), "bbox_regression": self.regression_head(x)}


class RetinaNetClassificationHead(nn.Module):
    """
    A classification head for use in RetinaNet.

    Args:
        in_channels (int): number of channels of the input feature
        num_anchors (int): number of anchors to be predicted
        num_classes (int): number of classes to be predicted
        norm_layer (callable, optional): Module specifying the normalization layer to use. Default: None
    """

    _version = 2

    def __init__(
        self,
        in_channels,
        num_anchors,
        num_classes,
        prior_probability=0.01,
        norm_layer: Optional[Callable[..., nn.Module]] = None,  # noqa: UP045
    ):
        super().__init__()

        conv = []
        for _ in range(4):
            conv.append(Conv2dNormActivation(in_channels, in_channels, norm_layer=norm_layer))
        self.conv = nn.Sequential(*conv)

        for layer in self.conv.modules():
            if isinstance(layer, nn.Conv2d):
                torch.nn.init.normal_(layer.weight, std=0.01)
                if layer.bias is not None:
                    torch.nn.init.constant_(layer.bias, 0)

        self.cls_logits = nn.Conv2d(in_channels, num_anchors * num_classes, kernel_size=3, stride=1, padding=1)
        torch.nn.init.normal_(self.cls_logits.weight, std=0.01)
        torch.nn.init.constant_(self.cls_logits.bias, -math.log((1 - prior_probability) / prior_probability))

        self.num_classes = num_classes
        self.num_anchors = num_anchors

    def forward(self, x):
        # type: (List[Tensor]) -> Tensor
        all_cls_logits = []

        for features in x:
            cls_logits = self.conv(features)
            cls_logits = self.cls_logits(cls_logits)

            # Permute classification output from (N, A * K, H, W) to (N, HWA, K).
            N, _, H, W = cls_logits.shape
            cls_logits = cls_logits.view(N, -1, self.num_classes, H, W)
            cls_logits = cls_logits.permute(0, 3, 4, 1, 2)
            cls_logits = cls_logits.reshape(N, -1, self.num_classes)  # Size=(N, HWA, 4)

            all_cls_logits.append(cls_logits)

        return torch.cat(all_cls_logits, dim=1)


class RetinaNetRegressionHead(nn.Module):
    """
    A regression head for use in RetinaNet.

    Args:
        in_channels (int): number of channels of the input feature
        num_anchors (int): number of anchors to be predicted
        norm_layer (callable, optional): Module specifying the normalization layer to use. Default: None
    """

    _version = 2

    def __init__(self, in_channels, num_anchors, norm_layer: Optional[Callable[..., nn.Module]] = None):  # noqa: UP045
        super().__init__()

        conv = []
        for _ in range(4):
            conv.append(Conv2dNormActivation(in_channels, in_channels, norm_layer=norm_layer))
        self.conv = nn.Sequential(*conv)

        self.bbox_reg = nn.Conv2d(in_channels, num_anchors * 4, kernel_size=3, stride=1, padding=1)
        torch.nn.init.normal_(self.bbox_reg.weight, std=0.01)
        torch.nn.init.zeros_(self.bbox_reg.bias)

        for layer in self.conv.modules():
            if isinstance(layer, nn.Conv2d):
                torch.nn.init.normal_(layer.weight, std=0.01)
                if layer.bias is not None:
                    torch.nn.init.zeros_(layer.bias)

        self._loss_type = "l1"

    def forward(self, x):
        # type: (List[Tensor]) -> Tensor
        all_bbox_regression = []

        for features in x:
            bbox_regression = self.conv(features)
            bbox_regression = self.bbox_reg(bbox_regression)

            # Permute bbox regression output from (N, 4 * A, H, W) to (N, HWA, 4).
            N, _, H, W = bbox_regression.shape
            bbox_regression = bbox_regression.view(N, -1, 4, H, W)
            bbox_regression = bbox_regression.permute(0, 3, 4, 1, 2)
            bbox_regression = bbox_regression.reshape(N, -1, 4)  # Size=(N, HWA, 4)

            all_bbox_regression.append(bbox_regression)

        return torch.cat(all_bbox_regression, dim=1)


class Model(nn.Module):
    """retinanet_resnet50_fpn_v2's head on the FPN's outputs (features = list(features.values()))."""

    def __init__(self, in_channels: int, num_anchors: int, num_classes: int):
        super().__init__()
        self.head = RetinaNetHead(in_channels, num_anchors, num_classes, norm_layer=partial(nn.GroupNorm, 32))
        with torch.no_grad():  # stand-ins for trained GroupNorm affine parameters
            for m in self.head.modules():
                if isinstance(m, nn.GroupNorm):
                    m.weight.add_(torch.randn_like(m.weight) * 0.1)
                    m.bias.normal_(0.0, 0.1)

    def forward(self, p3, p4, p5, p6, p7):
        features: List[Tensor] = [p3, p4, p5, p6, p7]  # noqa: UP006
        head_outputs: Dict[str, Tensor] = self.head(features)  # noqa: UP006
        return head_outputs["cls_logits"], head_outputs["bbox_regression"]


batch = 2
in_channels = 64
num_anchors = 9  # 3 sizes x 3 aspect ratios per location
num_classes = 91
image_size = 128


def get_inputs():
    # P3..P7: strides 8, 16, 32, 64, 128
    return [torch.randn(batch, in_channels, image_size // s, image_size // s) for s in (8, 16, 32, 64, 128)]


def get_init_inputs():
    return [in_channels, num_anchors, num_classes]
