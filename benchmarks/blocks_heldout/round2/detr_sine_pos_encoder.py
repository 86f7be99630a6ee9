"""DETR encoder path: mask downsampling (Joiner), PositionEmbeddingSine (normalize=True),
input_proj 1x1 conv, and the post-norm TransformerEncoder (q = k = src + pos, value = src,
key_padding_mask), output reshaped back to a feature map.

Follows facebookresearch/detr: `util/misc.py` (`NestedTensor`), `models/backbone.py`
(`BackboneBase.forward`: `F.interpolate(m[None].float(), size=x.shape[-2:]).to(torch.bool)[0]`),
`models/position_encoding.py` (`PositionEmbeddingSine`: cumsum of ~mask, normalise by the last
row/col * 2pi, `dim_t = temperature ** (2 * (dim_t // 2) / num_pos_feats)`, stack sin/cos of the
even/odd slices, flatten, cat(pos_y, pos_x), permute), `models/transformer.py`
(`TransformerEncoderLayer` with `with_pos_embed` and `forward_post`/`forward_pre`,
`TransformerEncoder`, `_get_clones`, `_get_activation_fn`, and the encoder half of
`Transformer.forward`: flatten(2).permute(2, 0, 1), `mask.flatten(1)`,
`memory.permute(1, 2, 0).view(bs, c, h, w)`), and the `input_proj` of `models/detr.py`.

Shapes: backbone feature (2, 512, 20, 27) (the stride-32 C5 map of a 640x864 padded batch,
channels reduced from 2048 to 512), pixel padding mask (2, 640, 864) bool with row 1 padded
right/bottom (valid 480x640);
hidden_dim 256, 8 heads, dim_feedforward 1024, 2 encoder layers, dropout 0.1, normalize_before
False. Output (2, 256, 20, 27).

Changes: the ResNet backbone is replaced by its output feature map given as input; backbone
channels 2048 -> 512 and 6 -> 2 encoder layers (CPU budget). LayerNorm affine params set to random
non-trivial values under torch.no_grad(). Transformer._reset_parameters (xavier_uniform_) kept.
"""
import copy
import math
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import nn, Tensor

BATCH = 2
BACKBONE_CHANNELS = 512
FEAT_H = 20
FEAT_W = 27
IMG_H = 640
IMG_W = 864
HIDDEN_DIM = 256
NHEADS = 8
DIM_FEEDFORWARD = 1024
ENC_LAYERS = 2
DROPOUT = 0.1


class NestedTensor(object):
    def __init__(self, tensors, mask: Optional[Tensor]):
        self.tensors = tensors
        self.mask = mask

    def to(self, device):
        # type: (Device) -> NestedTensor # noqa
        cast_tensor = self.tensors.to(device)
        mask = self.mask
        if mask is not None:
            assert mask is not None
            cast_mask = mask.to(device)
        else:
            cast_mask = None
        return NestedTensor(cast_tensor, cast_mask)

    def decompose(self):
        return self.tensors, self.mask

    def __repr__(self):
        return str(self.tensors)


class PositionEmbeddingSine(nn.Module):
    """
    This is a more standard version of the position embedding, very similar to the one
    used by the Attention is all you need paper, generalized to work on images.
    """
    def __init__(self, num_pos_feats=64, temperature=10000, normalize=False, scale=None):
        super().__init__()
        self.num_pos_feats = num_pos_feats
        self.temperature = temperature
        self.normalize = normalize
        if scale is not None and normalize is False:
            raise ValueError("normalize should be True if scale is passed")
        if scale is None:
            scale = 2 * math.pi
        self.scale = scale

    def forward(self, tensor_list: NestedTensor):
        x = tensor_list.tensors
        mask = tensor_list.mask
        assert mask is not None
        not_mask = ~mask
        y_embed = not_mask.cumsum(1, dtype=torch.float32)
        x_embed = not_mask.cumsum(2, dtype=torch.float32)
        if self.normalize:
            eps = 1e-6
            y_embed = y_embed / (y_embed[:, -1:, :] + eps) * self.scale
            x_embed = x_embed / (x_embed[:, :, -1:] + eps) * self.scale

        dim_t = torch.arange(self.num_pos_feats, dtype=torch.float32, device=x.device)
        dim_t = self.temperature ** (2 * (dim_t // 2) / self.num_pos_feats)

        pos_x = x_embed[:, :, :, None] / dim_t
        pos_y = y_embed[:, :, :, None] / dim_t
        pos_x = torch.stack((pos_x[:, :, :, 0::2].sin(), pos_x[:, :, :, 1::2].cos()), dim=4).flatten(3)
        pos_y = torch.stack((pos_y[:, :, :, 0::2].sin(), pos_y[:, :, :, 1::2].cos()), dim=4).flatten(3)
        pos = torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)
        return pos


class TransformerEncoder(nn.Module):

    def __init__(self, encoder_layer, num_layers, norm=None):
        super().__init__()
        self.layers = _get_clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, src,
                mask: Optional[Tensor] = None,
                src_key_padding_mask: Optional[Tensor] = None,
                pos: Optional[Tensor] = None):
        output = src

        for layer in self.layers:
            output = layer(output, src_mask=mask,
                           src_key_padding_mask=src_key_padding_mask, pos=pos)

        if self.norm is not None:
            output = self.norm(output)

        return output


class TransformerEncoderLayer(nn.Module):

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1,
                 activation="relu", normalize_before=False):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        # Implementation of Feedforward model
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model)

        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

        self.activation = _get_activation_fn(activation)
        self.normalize_before = normalize_before

    def with_pos_embed(self, tensor, pos: Optional[Tensor]):
        return tensor if pos is None else tensor + pos

    def forward_post(self,
                     src,
                     src_mask: Optional[Tensor] = None,
                     src_key_padding_mask: Optional[Tensor] = None,
                     pos: Optional[Tensor] = None):
        q = k = self.with_pos_embed(src, pos)
        src2 = self.self_attn(q, k, value=src, attn_mask=src_mask,
                              key_padding_mask=src_key_padding_mask)[0]
        src = src + self.dropout1(src2)
        src = self.norm1(src)
        src2 = self.linear2(self.dropout(self.activation(self.linear1(src))))
        src = src + self.dropout2(src2)
        src = self.norm2(src)
        return src

    def forward_pre(self, src,
                    src_mask: Optional[Tensor] = None,
                    src_key_padding_mask: Optional[Tensor] = None,
                    pos: Optional[Tensor] = None):
        src2 = self.norm1(src)
        q = k = self.with_pos_embed(src2, pos)
        src2 = self.self_attn(q, k, value=src2, attn_mask=src_mask,
                              key_padding_mask=src_key_padding_mask)[0]
        src = src + self.dropout1(src2)
        src2 = self.norm2(src)
        src2 = self.linear2(self.dropout(self.activation(self.linear1(src2))))
        src = src + self.dropout2(src2)
        return src

    def forward(self, src,
                src_mask: Optional[Tensor] = None,
                src_key_padding_mask: Optional[Tensor] = None,
                pos: Optional[Tensor] = None):
        if self.normalize_before:
            return self.forward_pre(src, src_mask, src_key_padding_mask, pos)
        return self.forward_post(src, src_mask, src_key_padding_mask, pos)


def _get_clones(module, N):
    return nn.ModuleList([copy.deepcopy(module) for i in range(N)])


def _get_activation_fn(activation):
    """Return an activation function given a string"""
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    if activation == "glu":
        return F.glu
    raise RuntimeError(F"activation should be relu/gelu, not {activation}.")


class Model(nn.Module):
    def __init__(self, backbone_channels, hidden_dim, nheads, dim_feedforward, enc_layers, dropout):
        super().__init__()
        self.input_proj = nn.Conv2d(backbone_channels, hidden_dim, kernel_size=1)
        N_steps = hidden_dim // 2
        self.position_embedding = PositionEmbeddingSine(N_steps, normalize=True)
        encoder_layer = TransformerEncoderLayer(hidden_dim, nheads, dim_feedforward, dropout, "relu", False)
        encoder_norm = None
        self.encoder = TransformerEncoder(encoder_layer, enc_layers, encoder_norm)
        self.d_model = hidden_dim
        self.nhead = nheads
        # Transformer._reset_parameters
        for p in self.encoder.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, nn.LayerNorm):
                    m.weight.copy_(1.0 + 0.2 * torch.randn_like(m.weight))
                    m.bias.copy_(0.1 * torch.randn_like(m.bias))

    def forward(self, feature, pixel_mask):
        # BackboneBase.forward: downsample the padding mask to the feature map
        m = pixel_mask
        assert m is not None
        mask = F.interpolate(m[None].float(), size=feature.shape[-2:]).to(torch.bool)[0]
        features = NestedTensor(feature, mask)
        # Joiner: position encoding
        pos = self.position_embedding(features).to(features.tensors.dtype)

        src, mask = features.decompose()
        assert mask is not None
        src = self.input_proj(src)
        pos_embed = pos

        # Transformer.forward (encoder part)
        # flatten NxCxHxW to HWxNxC
        bs, c, h, w = src.shape
        src = src.flatten(2).permute(2, 0, 1)
        pos_embed = pos_embed.flatten(2).permute(2, 0, 1)
        mask = mask.flatten(1)

        memory = self.encoder(src, src_key_padding_mask=mask, pos=pos_embed)
        return memory.permute(1, 2, 0).view(bs, c, h, w)


def get_inputs():
    feature = torch.relu(torch.randn(BATCH, BACKBONE_CHANNELS, FEAT_H, FEAT_W))
    pixel_mask = torch.zeros(BATCH, IMG_H, IMG_W, dtype=torch.bool)
    pixel_mask[1, 480:, :] = True
    pixel_mask[1, :, 640:] = True
    return [feature, pixel_mask]


def get_init_inputs():
    return [BACKBONE_CHANNELS, HIDDEN_DIM, NHEADS, DIM_FEEDFORWARD, ENC_LAYERS, DROPOUT]
