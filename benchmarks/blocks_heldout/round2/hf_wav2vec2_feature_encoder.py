"""wav2vec 2.0 front end: raw-waveform conv feature encoder (first layer GroupNorm(C, C), rest
plain conv + GELU), feature projection (LayerNorm + Linear), frame-level attention mask from the
sample-level mask, masking of padded frames, and the weight-normed grouped positional conv
embedding + encoder LayerNorm.

Follows HuggingFace transformers `models/wav2vec2/modeling_wav2vec2.py` (v4.3x):
`Wav2Vec2NoLayerNormConvLayer`, `Wav2Vec2GroupNormConvLayer`, `Wav2Vec2FeatureEncoder`
(`input_values[:, None]`, feat_extract_norm == "group"), `Wav2Vec2FeatureProjection` (returns
`(hidden_states, norm_hidden_states)`), `Wav2Vec2Model._get_feat_extract_output_lengths`
(`torch.div(..., rounding_mode="floor") + 1` per conv), `_get_feature_vector_attention_mask`
(scatter 1 at `output_lengths - 1`, then `flip -> cumsum -> flip -> bool`),
`Wav2Vec2SamePadLayer`, `Wav2Vec2PositionalConvEmbedding` (weight_norm with dim=2, using
`nn.utils.parametrizations.weight_norm` when available), and the start of `Wav2Vec2Encoder.forward`
(`hidden_states[~expand_attention_mask] = 0`, `+ position_embeddings`, LayerNorm, dropout).

Shapes: input_values (2, 16000) float32 (1 s at 16 kHz), attention_mask (2, 16000) int64 with
row 1 valid for 11200 samples. conv_dim (256,)*7, conv_kernel (10,3,3,3,3,2,2), conv_stride
(5,2,2,2,2,2,2) -> 49 frames; hidden 256; pos conv kernel 128, 16 groups.
Output tuple: (encoder-input hidden_states (2, 49, 256), extract_features (2, 49, 256)).

Changes: conv_dim reduced from 512 to 256 (CPU budget), config replaced by a small config
class; the transformer layers of the encoder are not included (see other benchmarks).
The feature-encoder convs get `_init_weights`' kaiming_normal_ init (without it the activations
shrink to ~0 by the last conv); GroupNorm / LayerNorm affine params set to random non-trivial
values under torch.no_grad().
"""
import math

import torch
import torch.nn as nn

BATCH = 2
NUM_SAMPLES = 16000
VALID_SAMPLES_ROW1 = 11200
CONV_DIM = (256, 256, 256, 256, 256, 256, 256)
CONV_KERNEL = (10, 3, 3, 3, 3, 2, 2)
CONV_STRIDE = (5, 2, 2, 2, 2, 2, 2)
HIDDEN_SIZE = 256
NUM_CONV_POS_EMBEDDINGS = 128
NUM_CONV_POS_EMBEDDING_GROUPS = 16
LAYER_NORM_EPS = 1e-5
FEAT_PROJ_DROPOUT = 0.1
HIDDEN_DROPOUT = 0.1


class Wav2Vec2Config:
    def __init__(self, conv_dim, conv_kernel, conv_stride, hidden_size, num_conv_pos_embeddings,
                 num_conv_pos_embedding_groups, layer_norm_eps, feat_proj_dropout, hidden_dropout):
        self.conv_dim = list(conv_dim)
        self.conv_kernel = list(conv_kernel)
        self.conv_stride = list(conv_stride)
        self.num_feat_extract_layers = len(self.conv_dim)
        self.conv_bias = False
        self.feat_extract_norm = "group"
        self.feat_extract_activation = "gelu"
        self.hidden_size = hidden_size
        self.num_conv_pos_embeddings = num_conv_pos_embeddings
        self.num_conv_pos_embedding_groups = num_conv_pos_embedding_groups
        self.layer_norm_eps = layer_norm_eps
        self.feat_proj_dropout = feat_proj_dropout
        self.hidden_dropout = hidden_dropout
        self.add_adapter = False


class Wav2Vec2NoLayerNormConvLayer(nn.Module):
    def __init__(self, config, layer_id=0):
        super().__init__()
        self.in_conv_dim = config.conv_dim[layer_id - 1] if layer_id > 0 else 1
        self.out_conv_dim = config.conv_dim[layer_id]

        self.conv = nn.Conv1d(
            self.in_conv_dim,
            self.out_conv_dim,
            kernel_size=config.conv_kernel[layer_id],
            stride=config.conv_stride[layer_id],
            bias=config.conv_bias,
        )
        self.activation = nn.GELU()

    def forward(self, hidden_states):
        hidden_states = self.conv(hidden_states)
        hidden_states = self.activation(hidden_states)
        return hidden_states


class Wav2Vec2GroupNormConvLayer(nn.Module):
    def __init__(self, config, layer_id=0):
        super().__init__()
        self.in_conv_dim = config.conv_dim[layer_id - 1] if layer_id > 0 else 1
        self.out_conv_dim = config.conv_dim[layer_id]

        self.conv = nn.Conv1d(
            self.in_conv_dim,
            self.out_conv_dim,
            kernel_size=config.conv_kernel[layer_id],
            stride=config.conv_stride[layer_id],
            bias=config.conv_bias,
        )
        self.activation = nn.GELU()

        self.layer_norm = nn.GroupNorm(num_groups=self.out_conv_dim, num_channels=self.out_conv_dim, affine=True)

    def forward(self, hidden_states):
        hidden_states = self.conv(hidden_states)
        hidden_states = self.layer_norm(hidden_states)
        hidden_states = self.activation(hidden_states)
        return hidden_states


class Wav2Vec2SamePadLayer(nn.Module):
    def __init__(self, num_conv_pos_embeddings):
        super().__init__()
        self.num_pad_remove = 1 if num_conv_pos_embeddings % 2 == 0 else 0

    def forward(self, hidden_states):
        if self.num_pad_remove > 0:
            hidden_states = hidden_states[:, :, : -self.num_pad_remove]
        return hidden_states


class Wav2Vec2PositionalConvEmbedding(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.conv = nn.Conv1d(
            config.hidden_size,
            config.hidden_size,
            kernel_size=config.num_conv_pos_embeddings,
            padding=config.num_conv_pos_embeddings // 2,
            groups=config.num_conv_pos_embedding_groups,
        )

        weight_norm = nn.utils.weight_norm
        if hasattr(nn.utils.parametrizations, "weight_norm"):
            weight_norm = nn.utils.parametrizations.weight_norm

        self.conv = weight_norm(self.conv, name="weight", dim=2)

        self.padding = Wav2Vec2SamePadLayer(config.num_conv_pos_embeddings)
        self.activation = nn.GELU()

    def forward(self, hidden_states):
        hidden_states = hidden_states.transpose(1, 2)

        hidden_states = self.conv(hidden_states)
        hidden_states = self.padding(hidden_states)
        hidden_states = self.activation(hidden_states)

        hidden_states = hidden_states.transpose(1, 2)
        return hidden_states


class Wav2Vec2FeatureEncoder(nn.Module):
    """Construct the features from raw audio waveform"""

    def __init__(self, config):
        super().__init__()

        if config.feat_extract_norm == "group":
            conv_layers = [Wav2Vec2GroupNormConvLayer(config, layer_id=0)] + [
                Wav2Vec2NoLayerNormConvLayer(config, layer_id=i + 1) for i in range(config.num_feat_extract_layers - 1)
            ]
        else:
            raise ValueError(
                f"`config.feat_extract_norm` is {config.feat_extract_norm}, but has to be one of ['group', 'layer']"
            )
        self.conv_layers = nn.ModuleList(conv_layers)
        self.gradient_checkpointing = False
        self._requires_grad = True

    def _freeze_parameters(self):
        for param in self.parameters():
            param.requires_grad = False
        self._requires_grad = False

    def forward(self, input_values):
        hidden_states = input_values[:, None]

        # make sure hidden_states require grad for gradient_checkpointing
        if self._requires_grad and self.training:
            hidden_states.requires_grad = True

        for conv_layer in self.conv_layers:
            hidden_states = conv_layer(hidden_states)

        return hidden_states


class Wav2Vec2FeatureProjection(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layer_norm = nn.LayerNorm(config.conv_dim[-1], eps=config.layer_norm_eps)
        self.projection = nn.Linear(config.conv_dim[-1], config.hidden_size)
        self.dropout = nn.Dropout(config.feat_proj_dropout)

    def forward(self, hidden_states):
        # non-projected hidden states are needed for quantization
        norm_hidden_states = self.layer_norm(hidden_states)
        hidden_states = self.projection(norm_hidden_states)
        hidden_states = self.dropout(hidden_states)
        return hidden_states, norm_hidden_states


class Model(nn.Module):
    def __init__(self, conv_dim, conv_kernel, conv_stride, hidden_size, num_conv_pos_embeddings,
                 num_conv_pos_embedding_groups, layer_norm_eps, feat_proj_dropout, hidden_dropout):
        super().__init__()
        config = Wav2Vec2Config(conv_dim, conv_kernel, conv_stride, hidden_size, num_conv_pos_embeddings,
                                num_conv_pos_embedding_groups, layer_norm_eps, feat_proj_dropout, hidden_dropout)
        self.config = config
        self.feature_extractor = Wav2Vec2FeatureEncoder(config)
        self.feature_projection = Wav2Vec2FeatureProjection(config)
        # Wav2Vec2Encoder pieces that run before the transformer layers
        self.pos_conv_embed = Wav2Vec2PositionalConvEmbedding(config)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)
        # Wav2Vec2PreTrainedModel._init_weights, nn.Conv1d branch (feature encoder convs)
        for module in self.feature_extractor.modules():
            if isinstance(module, nn.Conv1d):
                nn.init.kaiming_normal_(module.weight)
                if module.bias is not None:
                    k = math.sqrt(module.groups / (module.in_channels * module.kernel_size[0]))
                    nn.init.uniform_(module.bias, a=-k, b=k)
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, (nn.LayerNorm, nn.GroupNorm)):
                    m.weight.copy_(1.0 + 0.2 * torch.randn_like(m.weight))
                    m.bias.copy_(0.1 * torch.randn_like(m.bias))

    def _get_feat_extract_output_lengths(self, input_lengths, add_adapter=None):
        """
        Computes the output length of the convolutional layers
        """

        add_adapter = self.config.add_adapter if add_adapter is None else add_adapter

        def _conv_out_length(input_length, kernel_size, stride):
            # 1D convolutional layer output length formula taken
            # from https://pytorch.org/docs/stable/generated/torch.nn.Conv1d.html
            return torch.div(input_length - kernel_size, stride, rounding_mode="floor") + 1

        for kernel_size, stride in zip(self.config.conv_kernel, self.config.conv_stride):
            input_lengths = _conv_out_length(input_lengths, kernel_size, stride)

        return input_lengths

    def _get_feature_vector_attention_mask(self, feature_vector_length, attention_mask, add_adapter=None):
        # Effectively attention_mask.sum(-1), but not inplace to be able to run
        # on inference mode.
        non_padded_lengths = attention_mask.cumsum(dim=-1)[:, -1]

        output_lengths = self._get_feat_extract_output_lengths(non_padded_lengths, add_adapter=add_adapter)
        output_lengths = output_lengths.to(torch.long)

        batch_size = attention_mask.shape[0]

        attention_mask = torch.zeros(
            (batch_size, feature_vector_length), dtype=attention_mask.dtype, device=attention_mask.device
        )
        # these two operations makes sure that all values before the output lengths idxs are attended to
        attention_mask[(torch.arange(attention_mask.shape[0], device=attention_mask.device), output_lengths - 1)] = 1
        attention_mask = attention_mask.flip([-1]).cumsum(-1).flip([-1]).bool()
        return attention_mask

    def forward(self, input_values, attention_mask):
        # Wav2Vec2Model.forward
        extract_features = self.feature_extractor(input_values)
        extract_features = extract_features.transpose(1, 2)

        if attention_mask is not None:
            # compute reduced attention_mask corresponding to feature vectors
            attention_mask = self._get_feature_vector_attention_mask(
                extract_features.shape[1], attention_mask, add_adapter=False
            )

        hidden_states, extract_features = self.feature_projection(extract_features)

        # Wav2Vec2Encoder.forward (up to the transformer layers)
        if attention_mask is not None:
            # make sure padded tokens output 0
            expand_attention_mask = attention_mask.unsqueeze(-1).repeat(1, 1, hidden_states.shape[2])
            hidden_states[~expand_attention_mask] = 0

        position_embeddings = self.pos_conv_embed(hidden_states)
        hidden_states = hidden_states + position_embeddings
        hidden_states = self.layer_norm(hidden_states)
        hidden_states = self.dropout(hidden_states)
        return hidden_states, extract_features


def get_inputs():
    input_values = torch.randn(BATCH, NUM_SAMPLES)
    attention_mask = torch.ones(BATCH, NUM_SAMPLES, dtype=torch.long)
    attention_mask[1, VALID_SAMPLES_ROW1:] = 0
    input_values = input_values * attention_mask
    return [input_values, attention_mask]


def get_init_inputs():
    return [CONV_DIM, CONV_KERNEL, CONV_STRIDE, HIDDEN_SIZE, NUM_CONV_POS_EMBEDDINGS, NUM_CONV_POS_EMBEDDING_GROUPS,
            LAYER_NORM_EPS, FEAT_PROJ_DROPOUT, HIDDEN_DROPOUT]
