"""transformers' BertEmbeddings (models/bert/modeling_bert.py, absolute positions), as a model's
first block: word, position and token-type embeddings looked up from int64 ids, summed, LayerNorm,
dropout. position_ids is a registered buffer sliced to the sequence length; token_type_ids default
to a zeros buffer. Written out without the transformers import."""

import torch
import torch.nn as nn


class BertEmbeddings(nn.Module):
    def __init__(self, vocab_size, hidden_size, max_position_embeddings, type_vocab_size, pad_token_id=0, eps=1e-12):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=pad_token_id)
        self.position_embeddings = nn.Embedding(max_position_embeddings, hidden_size)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=eps)
        self.dropout = nn.Dropout(0.1)
        self.position_embedding_type = "absolute"
        self.register_buffer("position_ids", torch.arange(max_position_embeddings).expand((1, -1)), persistent=False)
        self.register_buffer(
            "token_type_ids", torch.zeros(self.position_ids.size(), dtype=torch.long), persistent=False
        )

    def forward(self, input_ids=None, token_type_ids=None, position_ids=None, past_key_values_length=0):
        input_shape = input_ids.size()
        seq_length = input_shape[1]
        if position_ids is None:
            position_ids = self.position_ids[:, past_key_values_length : seq_length + past_key_values_length]
        if token_type_ids is None:
            buffered_token_type_ids = self.token_type_ids[:, :seq_length]
            buffered_token_type_ids_expanded = buffered_token_type_ids.expand(input_shape[0], seq_length)
            token_type_ids = buffered_token_type_ids_expanded

        inputs_embeds = self.word_embeddings(input_ids)
        token_type_embeddings = self.token_type_embeddings(token_type_ids)
        embeddings = inputs_embeds + token_type_embeddings
        if self.position_embedding_type == "absolute":
            position_embeddings = self.position_embeddings(position_ids)
            embeddings += position_embeddings
        embeddings = self.LayerNorm(embeddings)
        embeddings = self.dropout(embeddings)
        return embeddings


class Model(nn.Module):
    def __init__(self, vocab, hidden, max_pos, types):
        super().__init__()
        self.emb = BertEmbeddings(vocab, hidden, max_pos, types)

    def forward(self, input_ids):
        return self.emb(input_ids)


def get_inputs():
    return [torch.randint(0, 30522, (8, 128))]


def get_init_inputs():
    return [30522, 768, 512, 2]
