"""Mixtral sparse mixture-of-experts block (top-2 router, per-expert loop with index_add_).

Follows HuggingFace transformers `models/mixtral/modeling_mixtral.py` (v4.40 era):
`MixtralBlockSparseTop2MLP` (w1/w3 gate+up, SiLU, w2 down) and `MixtralSparseMoeBlock.forward`
(router softmax in fp32, topk, renormalise, one_hot expert mask permuted to (expert, k, token),
`torch.where` per expert, `hidden_states[None, top_x]`, `index_add_` into the output buffer,
returns `(final_hidden_states, router_logits)`).

Shapes: batch 2, seq 256 (512 tokens), hidden 256, ffn 512, 8 experts, top-2, hidden_act "silu".

Changes: the config object is replaced by constructor arguments; ACT2FN["silu"] is nn.SiLU().
router_jitter_noise is kept (only active in training). Output is the tuple
(final_hidden_states (2, 256, 256), router_logits (512, 8)).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 2
SEQ_LEN = 256
HIDDEN_SIZE = 256
INTERMEDIATE_SIZE = 512
NUM_LOCAL_EXPERTS = 8
NUM_EXPERTS_PER_TOK = 2
ROUTER_JITTER_NOISE = 0.0


class MixtralBlockSparseTop2MLP(nn.Module):
    def __init__(self, hidden_size, intermediate_size):
        super().__init__()
        self.ffn_dim = intermediate_size
        self.hidden_dim = hidden_size

        self.w1 = nn.Linear(self.hidden_dim, self.ffn_dim, bias=False)
        self.w2 = nn.Linear(self.ffn_dim, self.hidden_dim, bias=False)
        self.w3 = nn.Linear(self.hidden_dim, self.ffn_dim, bias=False)

        self.act_fn = nn.SiLU()

    def forward(self, hidden_states):
        current_hidden_states = self.act_fn(self.w1(hidden_states)) * self.w3(hidden_states)
        current_hidden_states = self.w2(current_hidden_states)
        return current_hidden_states


class MixtralSparseMoeBlock(nn.Module):
    """
    This implementation is
    strictly equivalent to standard MoE with full capacity (no
    dropped tokens). It's faster since it formulates MoE operations
    in terms of block-sparse operations to accomodate imbalanced
    assignments of tokens to experts, whereas standard MoE either
    (1) drop tokens at the cost of reduced performance or (2) set
    capacity factor to number of experts and thus waste computation
    and memory on padding.
    """

    def __init__(self, hidden_size, intermediate_size, num_local_experts, num_experts_per_tok, router_jitter_noise):
        super().__init__()
        self.hidden_dim = hidden_size
        self.ffn_dim = intermediate_size
        self.num_experts = num_local_experts
        self.top_k = num_experts_per_tok

        # gating
        self.gate = nn.Linear(self.hidden_dim, self.num_experts, bias=False)

        self.experts = nn.ModuleList(
            [MixtralBlockSparseTop2MLP(hidden_size, intermediate_size) for _ in range(self.num_experts)]
        )

        # Jitter parameters
        self.jitter_noise = router_jitter_noise

    def forward(self, hidden_states: torch.Tensor):
        """ """
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        if self.training and self.jitter_noise > 0:
            hidden_states *= torch.empty_like(hidden_states).uniform_(1.0 - self.jitter_noise, 1.0 + self.jitter_noise)
        hidden_states = hidden_states.view(-1, hidden_dim)
        # router_logits: (batch * sequence_length, n_experts)
        router_logits = self.gate(hidden_states)

        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        # we cast back to the input dtype
        routing_weights = routing_weights.to(hidden_states.dtype)

        final_hidden_states = torch.zeros(
            (batch_size * sequence_length, hidden_dim), dtype=hidden_states.dtype, device=hidden_states.device
        )

        # One hot encode the selected experts to create an expert mask
        # this will be used to easily index which expert is going to be sollicitated
        expert_mask = torch.nn.functional.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)

        # Loop over all available experts in the model and perform the computation on each expert
        for expert_idx in range(self.num_experts):
            expert_layer = self.experts[expert_idx]
            idx, top_x = torch.where(expert_mask[expert_idx])

            # Index the correct hidden states and compute the expert hidden state for
            # the current expert. We need to make sure to multiply the output hidden
            # states by `routing_weights` on the corresponding tokens (top-1 and top-2)
            current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            current_hidden_states = expert_layer(current_state) * routing_weights[top_x, idx, None]

            # However `index_add_` only support torch tensors for indexing so we'll use
            # the `top_x` tensor here.
            final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
        final_hidden_states = final_hidden_states.reshape(batch_size, sequence_length, hidden_dim)
        return final_hidden_states, router_logits


class Model(nn.Module):
    def __init__(self, hidden_size, intermediate_size, num_local_experts, num_experts_per_tok, router_jitter_noise):
        super().__init__()
        self.block_sparse_moe = MixtralSparseMoeBlock(
            hidden_size, intermediate_size, num_local_experts, num_experts_per_tok, router_jitter_noise
        )

    def forward(self, hidden_states):
        return self.block_sparse_moe(hidden_states)


def get_inputs():
    return [torch.randn(BATCH, SEQ_LEN, HIDDEN_SIZE)]


def get_init_inputs():
    return [HIDDEN_SIZE, INTERMEDIATE_SIZE, NUM_LOCAL_EXPERTS, NUM_EXPERTS_PER_TOK, ROUTER_JITTER_NOISE]
