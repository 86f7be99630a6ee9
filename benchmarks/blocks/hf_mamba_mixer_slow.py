"""A Mamba block as Hugging Face transformers' models/mamba/modeling_mamba.py writes it (v5.0 dev, 2025), on the path
it takes without the CUDA kernels (causal-conv1d / mamba-ssm not loaded, or not on cuda): MambaBlock (MambaRMSNorm with
its float32 upcast, residual kept in float32) around MambaMixer.forward -> MambaMixer.slow_forward: in_proj,
transpose, chunk into hidden states and gate, the 2D attention mask multiplied in (before and after the convolution),
the depthwise causal Conv1d (padding conv_kernel - 1, sliced back to seq_len) with SiLU, x_proj and torch.split into
time step / B / C, dt_proj and softplus, A = -exp(A_log), discrete_A = exp(A * dt) and deltaB_u by broadcasting
(`[None, :, None, :]` indexing, `.float()` casts), then the sequential selective scan: a Python for-loop over the
sequence (`ssm_state = discrete_A[:, :, i, :] * ssm_state + deltaB_u[:, :, i, :]`, torch.matmul with
C[:, i, :].unsqueeze(-1), list append), torch.stack, the D skip term, the SiLU gate and out_proj; driven the way
MambaModel.forward drives its layers (inputs_embeds and a 2D attention mask in, use_cache=False), then norm_f. Shapes
as state-spaces/mamba-130m-hf (expand 2, state_size 16, conv_kernel 4, time_step_rank ceil(hidden / 16), no in/out
bias, conv bias, residual_in_fp32) but smaller, initialised as MambaPreTrainedModel._init_weights does (normal
Linear weights, the dt_proj weight uniform in +-time_step_rank**-0.5 and its bias the inverse softplus of a
log-uniform time step, kaiming conv1d / out_proj). Changed: MambaConfig's fields passed as arguments, ACT2FN["silu"]
written out as nn.SiLU, the lazily loaded CUDA kernels (and cuda_kernels_forward / warn_slow_implementation) replaced
by their None fallbacks, is_torchdynamo_compiling written out, the cache_params type annotations (MambaCache) dropped
with the MambaCache class (the cache branches stay, never taken), GradientCheckpointingLayer as nn.Module, one layer
instead of num_hidden_layers."""

import math

import torch
from torch import nn

# the fast path's kernels (lazy_load_kernel("causal-conv1d") / ("mamba-ssm")) and mambapy are not available
causal_conv1d_update, causal_conv1d_fn = None, None
selective_state_update, selective_scan_fn, mamba_inner_fn = None, None, None
pscan = None


def is_torchdynamo_compiling():
    try:
        import torch

        return torch.compiler.is_compiling()
    except Exception:
        return False


class MambaMixer(nn.Module):
    """
    Compute ∆, A, B, C, and D the state space parameters and compute the `contextualized_states`.
    A, D are input independent (see Mamba paper [1] Section 3.5.2 "Interpretation of A" for why A isn't selective)
    ∆, B, C are input-dependent (this is a key difference between Mamba and the linear time invariant S4,
    and is why Mamba is called **selective** state spaces)
    """

    def __init__(self, hidden_size, state_size, conv_kernel, intermediate_size, time_step_rank, layer_idx,
                 use_conv_bias=True, use_bias=False, hidden_act="silu", use_mambapy=False):  # fmt: skip
        super().__init__()
        self.hidden_size = hidden_size
        self.ssm_state_size = state_size
        self.conv_kernel_size = conv_kernel
        self.intermediate_size = intermediate_size
        self.time_step_rank = int(time_step_rank)
        self.layer_idx = layer_idx
        self.use_conv_bias = use_conv_bias
        self.use_bias = use_bias

        # Initialize conv1d with bias if specified
        self.conv1d = nn.Conv1d(
            in_channels=self.intermediate_size,
            out_channels=self.intermediate_size,
            bias=self.use_conv_bias,
            kernel_size=conv_kernel,
            groups=self.intermediate_size,
            padding=conv_kernel - 1,
        )
        if self.use_conv_bias:
            nn.init.zeros_(self.conv1d.bias)

        self.activation = hidden_act
        self.act = nn.SiLU()

        self.use_mambapy = use_mambapy

        # Initialize projections with bias if specified
        self.in_proj = nn.Linear(self.hidden_size, self.intermediate_size * 2, bias=self.use_bias)
        if self.use_bias:
            nn.init.zeros_(self.in_proj.bias)

        # selective projection used to make dt, B and C input dependent
        self.x_proj = nn.Linear(self.intermediate_size, self.time_step_rank + self.ssm_state_size * 2, bias=False)

        # time step projection (discretization)
        self.dt_proj = nn.Linear(self.time_step_rank, self.intermediate_size, bias=True)
        nn.init.zeros_(self.dt_proj.bias)

        # S4D real initialization
        A = torch.arange(1, self.ssm_state_size + 1, dtype=torch.float32)[None, :]
        A = A.expand(self.intermediate_size, -1).contiguous()

        self.A_log = nn.Parameter(torch.log(A))
        self.D = nn.Parameter(torch.ones(self.intermediate_size))

        # Initialize output projection with bias if specified
        self.out_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=self.use_bias)
        if self.use_bias:
            nn.init.zeros_(self.out_proj.bias)

    # fmt: off
    def slow_forward(self, input_states, cache_params=None, cache_position:torch.LongTensor | None=None, attention_mask: torch.LongTensor | None = None):
        batch_size, seq_len, _ = input_states.shape
        dtype = input_states.dtype
        # 1. Gated MLP's linear projection
        projected_states = self.in_proj(input_states).transpose(1, 2)                   # [batch, 2 * intermediate_size, seq_len]
        hidden_states, gate = projected_states.chunk(2, dim=1)

        if attention_mask is not None:
            hidden_states = hidden_states * attention_mask.unsqueeze(1)

        # 2. Convolution sequence transformation
        if cache_params is not None:
            ssm_state = cache_params.ssm_states[self.layer_idx].clone()
            ssm_state = ssm_state.to(hidden_states.device)
            # use `cache_position.shape[0]` to check whether we are in prefill
            # stage, it's equivalent to check `cache_position[0] == 0`, which
            # breaks dynamo fullgraph constraints
            if cache_position.shape[0] == self.conv_kernel_size:
                conv_state = nn.functional.pad(
                    hidden_states,
                    (self.conv_kernel_size - hidden_states.shape[-1], 0)
                )

                cache_params.update_conv_state(self.layer_idx, conv_state, cache_position)
                hidden_states = self.act(self.conv1d(hidden_states)[..., :seq_len])     # [batch, intermediate_size, seq_len]
            else:
                conv_state = cache_params.update_conv_state(self.layer_idx, hidden_states, cache_position)
                conv_state = conv_state.to(self.conv1d.weight.device)
                hidden_states = torch.sum(conv_state * self.conv1d.weight[:, 0, :], dim=-1)
                if self.use_conv_bias:
                    hidden_states += self.conv1d.bias
                hidden_states = self.act(hidden_states).to(dtype).unsqueeze(-1)         # [batch, intermediate_size, 1] : decoding
        else:
            ssm_state = torch.zeros(
                (batch_size, self.intermediate_size, self.ssm_state_size),
                device=hidden_states.device, dtype=dtype
            )
            hidden_states = self.act(self.conv1d(hidden_states)[..., :seq_len])         # [batch, intermediate_size, seq_len]

        if attention_mask is not None:
            hidden_states = hidden_states * attention_mask.unsqueeze(1)

        # 3. State Space Model sequence transformation
        # 3.a. Selection:  [batch, seq_len, self.time_step_rank + self.ssm_state_size * 2]
        ssm_parameters = self.x_proj(hidden_states.transpose(1, 2))
        time_step, B, C = torch.split(
            ssm_parameters, [self.time_step_rank, self.ssm_state_size, self.ssm_state_size], dim=-1
        )
        discrete_time_step = self.dt_proj(time_step)                                    # [batch, seq_len, intermediate_size]
        discrete_time_step = nn.functional.softplus(discrete_time_step).transpose(1, 2) # [batch, intermediate_size, seq_len]

        # 3.b. Discretization: B and C to [batch, seq_len, intermediate_size, ssm_state_size] (SRAM)
        A = -torch.exp(self.A_log.float())                                              # [intermediate_size, ssm_state_size]
        discrete_A = torch.exp(A[None, :, None, :] * discrete_time_step[:, :, :, None]) # [batch, intermediate_size, seq_len, ssm_state_size]
        discrete_B = discrete_time_step[:, :, :, None] * B[:, None, :, :].float()       # [batch, intermediate_size, seq_len, ssm_state_size]
        deltaB_u = discrete_B * hidden_states[:, :, :, None].float()

        # 3.c perform the recurrence y ← SSM(A, B, C)(x)
        if self.use_mambapy and self.training and cache_params is None:
            hs = pscan(discrete_A.transpose(1, 2), deltaB_u.transpose(1, 2)) # [batch, seq_len, intermediate_size, ssm_state_size]

            scan_output = (hs @ C.unsqueeze(-1)).squeeze(3).transpose(1, 2) # [batch, intermediate_size, seq_len]
            scan_output = scan_output + hidden_states * self.D[None, :, None]
            scan_output = scan_output * self.act(gate)
        else:
            scan_outputs = []
            for i in range(seq_len):
                ssm_state = discrete_A[:, :, i, :] * ssm_state + deltaB_u[:, :, i, :]      # [batch, intermediate_size, ssm_state]
                scan_output = torch.matmul(ssm_state.to(dtype), C[:, i, :].unsqueeze(-1))  # [batch, intermediate_size, 1]
                scan_outputs.append(scan_output[:, :, 0])
            scan_output = torch.stack(scan_outputs, dim=-1)                                # [batch, intermediate_size, seq_len]
            scan_output = scan_output + (hidden_states * self.D[None, :, None])
            scan_output = (scan_output * self.act(gate))

            if cache_params is not None:
                cache_params.ssm_states[self.layer_idx].copy_(ssm_state)

        # 4. Final linear projection
        contextualized_states = self.out_proj(scan_output.transpose(1, 2))  # [batch, seq_len, hidden_size]
        return contextualized_states
    # fmt: on

    def forward(
        self,
        hidden_states,
        cache_params=None,
        cache_position: torch.LongTensor | None = None,
        attention_mask: torch.LongTensor | None = None,
    ):
        is_fast_path_available = all(
            (selective_state_update, selective_scan_fn, causal_conv1d_fn, causal_conv1d_update, mamba_inner_fn)
        )
        if is_fast_path_available and "cuda" in self.x_proj.weight.device.type and not is_torchdynamo_compiling():
            return self.cuda_kernels_forward(hidden_states, cache_params, cache_position, attention_mask)
        return self.slow_forward(hidden_states, cache_params, cache_position, attention_mask)


class MambaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        """
        MambaRMSNorm is equivalent to T5LayerNorm and LlamaRMSNorm
        """
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)

    def extra_repr(self):
        return f"{self.weight.shape[0]}, eps={self.variance_epsilon}"


class MambaBlock(nn.Module):
    def __init__(self, hidden_size, state_size, conv_kernel, intermediate_size, time_step_rank, layer_idx,
                 residual_in_fp32=True, layer_norm_epsilon=1e-5):  # fmt: skip
        super().__init__()
        self.layer_idx = layer_idx
        self.residual_in_fp32 = residual_in_fp32
        self.norm = MambaRMSNorm(hidden_size, eps=layer_norm_epsilon)
        self.mixer = MambaMixer(hidden_size, state_size, conv_kernel, intermediate_size, time_step_rank, layer_idx)

    def forward(
        self,
        hidden_states,
        cache_params=None,
        cache_position: torch.LongTensor | None = None,
        attention_mask: torch.LongTensor | None = None,
    ):
        residual = hidden_states
        hidden_states = self.norm(hidden_states.to(dtype=self.norm.weight.dtype))
        if self.residual_in_fp32:
            residual = residual.to(torch.float32)

        hidden_states = self.mixer(
            hidden_states, cache_params=cache_params, cache_position=cache_position, attention_mask=attention_mask
        )
        hidden_states = residual + hidden_states
        return hidden_states


class Model(nn.Module):
    """One MambaBlock and norm_f driven the way MambaModel.forward drives them (inputs_embeds and a 2D attention
    mask in, use_cache=False), initialised as MambaPreTrainedModel._init_weights does."""

    def __init__(self, hidden_size, state_size=16, expand=2, conv_kernel=4, layer_norm_epsilon=1e-5,
                 initializer_range=0.1, time_step_scale=1.0, time_step_min=0.001, time_step_max=0.1,
                 time_step_init_scheme="random", time_step_floor=1e-4, num_hidden_layers=1):  # fmt: skip
        super().__init__()
        # MambaConfig: intermediate_size = int(expand * hidden_size), time_step_rank "auto" = ceil(hidden_size / 16)
        self.intermediate_size = int(expand * hidden_size)
        self.time_step_rank = math.ceil(hidden_size / 16)
        self.initializer_range = initializer_range
        self.time_step_scale = time_step_scale
        self.time_step_min = time_step_min
        self.time_step_max = time_step_max
        self.time_step_init_scheme = time_step_init_scheme
        self.time_step_floor = time_step_floor
        self.rescale_prenorm_residual = False
        self.num_hidden_layers = num_hidden_layers

        self.layers = nn.ModuleList(
            [
                MambaBlock(hidden_size, state_size, conv_kernel, self.intermediate_size, self.time_step_rank, idx,
                           layer_norm_epsilon=layer_norm_epsilon)
                for idx in range(num_hidden_layers)
            ]
        )  # fmt: skip
        self.norm_f = MambaRMSNorm(hidden_size, eps=layer_norm_epsilon)
        # post_init: nn.Module.apply visits the children first, so the mixer's own init has the last word
        self.apply(self._init_weights)

    @torch.no_grad()
    def _init_weights(self, module):
        """Initialize the weights."""
        std = self.initializer_range
        if isinstance(module, MambaMixer):
            # S4D real initialization. These are not discretized!
            # The core is to load them, compute the discrete states, then write the updated state. Keeps the memory bounded
            A = torch.arange(1, module.ssm_state_size + 1, dtype=torch.float32)[None, :]
            A = A.expand(module.intermediate_size, -1).contiguous()
            module.A_log.copy_(torch.log(A))
            nn.init.ones_(module.D)

            dt_init_std = self.time_step_rank**-0.5 * self.time_step_scale
            if self.time_step_init_scheme == "constant":
                nn.init.constant_(module.dt_proj.weight, dt_init_std)
            elif self.time_step_init_scheme == "random":
                nn.init.uniform_(module.dt_proj.weight, -dt_init_std, dt_init_std)

            dt = torch.exp(
                torch.rand(self.intermediate_size) * (math.log(self.time_step_max) - math.log(self.time_step_min))
                + math.log(self.time_step_min)
            ).clamp(min=self.time_step_floor)
            # # Inverse of softplus: https://github.com/pytorch/pytorch/issues/72759
            inv_dt = dt + torch.log(-torch.expm1(-dt))
            module.dt_proj.bias.copy_(inv_dt)

            nn.init.kaiming_uniform_(module.conv1d.weight, a=math.sqrt(5))
            if module.conv1d.bias is not None:
                nn.init.zeros_(module.conv1d.bias)
            nn.init.kaiming_uniform_(module.out_proj.weight, a=math.sqrt(5))

            if self.rescale_prenorm_residual:
                p = module.out_proj.weight
                p /= math.sqrt(self.num_hidden_layers)

        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, MambaRMSNorm):
            nn.init.ones_(module.weight)

    def forward(self, inputs_embeds, attention_mask):
        cache_params = None
        cache_position = None
        hidden_states = inputs_embeds
        for mixer_block in self.layers:
            hidden_states = mixer_block(
                hidden_states,
                cache_params=cache_params,
                cache_position=cache_position,
                attention_mask=attention_mask,
            )

        hidden_states = self.norm_f(hidden_states)
        return hidden_states


batch_size = 2
seq_len = 64
hidden_size = 64


def get_inputs():
    inputs_embeds = torch.randn(batch_size, seq_len, hidden_size)
    # the tokenizer's left padding: the second sequence starts 8 tokens late
    attention_mask = torch.ones(batch_size, seq_len, dtype=torch.long)
    attention_mask[1, :8] = 0
    return [inputs_embeds, attention_mask]


def get_init_inputs():
    return [hidden_size]
