"""wav2vec 2.0's path from the feature encoder to the first transformer layer as Hugging Face transformers'
models/wav2vec2/modeling_wav2vec2.py writes it: Wav2Vec2FeatureProjection (LayerNorm, Linear, dropout), then the
head of Wav2Vec2Encoder.forward: padded frames zeroed in place through `hidden_states[~expand_attention_mask] = 0`,
Wav2Vec2PositionalConvEmbedding (a grouped Conv1d of kernel 128 under nn.utils.parametrizations.weight_norm with
dim=2, Wav2Vec2SamePadLayer dropping the last frame, GELU), added back, LayerNorm, dropout. Changed: Wav2Vec2Config's
fields passed as arguments, the deepspeed zero3 branch left out, ACT2FN["gelu"] written as nn.GELU()."""

import torch
import torch.nn as nn


class Wav2Vec2FeatureProjection(nn.Module):
    def __init__(self, conv_dim_last, hidden_size, layer_norm_eps=1e-5, feat_proj_dropout=0.0):
        super().__init__()
        self.layer_norm = nn.LayerNorm(conv_dim_last, eps=layer_norm_eps)
        self.projection = nn.Linear(conv_dim_last, hidden_size)
        self.dropout = nn.Dropout(feat_proj_dropout)

    def forward(self, hidden_states):
        # non-projected hidden states are needed for quantization
        norm_hidden_states = self.layer_norm(hidden_states)
        hidden_states = self.projection(norm_hidden_states)
        hidden_states = self.dropout(hidden_states)
        return hidden_states, norm_hidden_states


class Wav2Vec2SamePadLayer(nn.Module):
    def __init__(self, num_conv_pos_embeddings):
        super().__init__()
        self.num_pad_remove = 1 if num_conv_pos_embeddings % 2 == 0 else 0

    def forward(self, hidden_states):
        if self.num_pad_remove > 0:
            hidden_states = hidden_states[:, :, : -self.num_pad_remove]
        return hidden_states


class Wav2Vec2PositionalConvEmbedding(nn.Module):
    def __init__(self, hidden_size, num_conv_pos_embeddings, num_conv_pos_embedding_groups):
        super().__init__()
        self.conv = nn.Conv1d(
            hidden_size,
            hidden_size,
            kernel_size=num_conv_pos_embeddings,
            padding=num_conv_pos_embeddings // 2,
            groups=num_conv_pos_embedding_groups,
        )

        weight_norm = nn.utils.weight_norm
        if hasattr(nn.utils.parametrizations, "weight_norm"):
            weight_norm = nn.utils.parametrizations.weight_norm

        self.conv = weight_norm(self.conv, name="weight", dim=2)

        self.padding = Wav2Vec2SamePadLayer(num_conv_pos_embeddings)
        self.activation = nn.GELU()

    def forward(self, hidden_states):
        hidden_states = hidden_states.transpose(1, 2)

        hidden_states = self.conv(hidden_states)
        hidden_states = self.padding(hidden_states)
        hidden_states = self.activation(hidden_states)

        hidden_states = hidden_states.transpose(1, 2)
        return hidden_states


class Model(nn.Module):
    """Wav2Vec2Model.forward from extract_features (the feature encoder's output, transposed) through
    Wav2Vec2Encoder.forward up to the first layer; attention_mask is the frame-level boolean mask that
    Wav2Vec2Model._get_feature_vector_attention_mask returns."""

    def __init__(
        self,
        conv_dim_last,
        hidden_size,
        num_conv_pos_embeddings,
        num_conv_pos_embedding_groups,
        layer_norm_eps=1e-5,
        hidden_dropout=0.1,
    ):
        super().__init__()
        self.feature_projection = Wav2Vec2FeatureProjection(conv_dim_last, hidden_size, layer_norm_eps)
        self.pos_conv_embed = Wav2Vec2PositionalConvEmbedding(
            hidden_size, num_conv_pos_embeddings, num_conv_pos_embedding_groups
        )
        self.layer_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dropout = nn.Dropout(hidden_dropout)

    def forward(self, extract_features, attention_mask):
        hidden_states, extract_features = self.feature_projection(extract_features)

        if attention_mask is not None:
            # make sure padded tokens output 0
            expand_attention_mask = attention_mask.unsqueeze(-1).repeat(1, 1, hidden_states.shape[2])
            hidden_states[~expand_attention_mask] = 0

        position_embeddings = self.pos_conv_embed(hidden_states)
        hidden_states = hidden_states + position_embeddings
        hidden_states = self.layer_norm(hidden_states)
        hidden_states = self.dropout(hidden_states)
        return hidden_states


batch_size = 2
frames = 200
conv_dim_last = 512
hidden_size = 256
num_conv_pos_embeddings = 128
num_conv_pos_embedding_groups = 16


def get_inputs():
    extract_features = torch.randn(batch_size, frames, conv_dim_last)
    # the second utterance is shorter: its last 60 frames are padding
    attention_mask = torch.ones(batch_size, frames, dtype=torch.bool)
    attention_mask[1, frames - 60 :] = False
    return [extract_features, attention_mask]


def get_init_inputs():
    return [conv_dim_last, hidden_size, num_conv_pos_embeddings, num_conv_pos_embedding_groups]
