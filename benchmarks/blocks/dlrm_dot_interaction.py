"""DLRM's forward as facebookresearch/dlrm's dlrm_s_pytorch.py writes it (DLRM_Net, main branch 2020-2023), on one
device: the bottom MLP over the dense features (create_mlp: nn.Linear + ReLU per layer in an nn.Sequential, weights
drawn with numpy as N(0, sqrt(2 / (m + n))), biases N(0, sqrt(1 / m))), one nn.EmbeddingBag(n, m, mode="sum") per
sparse feature (create_emb: weights U(-sqrt(1 / n), sqrt(1 / n)) drawn with numpy) looked up in apply_emb with the
indices and offsets of each table (the rows of lS_i and lS_o, iterated with enumerate), interact_features with
arch_interaction_op="dot" and arch_interaction_itself=False (torch.cat of the dense row and the pooled embeddings,
.view((batch_size, -1, d)), torch.bmm with its transpose, the strictly lower triangle gathered by `Z[:, li, lj]` with
li / lj built by list comprehensions in the forward, torch.cat with the dense row) and the top MLP whose last layer
is a sigmoid (sigmoid_top = len(ln_top) - 2). Inputs as collate_wrapper_random_offset / the Criteo collate hand them
over: dense_x [B, 13] float, lS_o [T, B] int64 offsets (torch.stack of one offsets tensor per table), lS_i [T, B * P]
int64 indices (a fixed pooling factor P, --num-indices-per-lookup-fixed, so that the tables' indices stack).
Sizes smaller than the Criteo Kaggle configuration (26 tables, --arch-sparse-feature-size=16,
--arch-mlp-bot="13-512-256-64-16", --arch-mlp-top="512-256-1"): 8 tables of 100-4000 rows of 16 wide, bottom
13-64-32-16, top 52-64-1 (52 = 16 + 9 * 8 / 2), batch 64, 3 lookups per bag. Changed: argparse's fields passed as
arguments, the QR / MD embedding, quantization, weighted pooling, data / model parallel and distributed branches
dropped (sequential_forward only), sparse=True dropped from EmbeddingBag (only the gradient differs), loss_threshold 0
(no clamp)."""

import sys

import numpy as np
import torch
import torch.nn as nn


class DLRM_Net(nn.Module):
    def create_mlp(self, ln, sigmoid_layer):
        # build MLP layer by layer
        layers = nn.ModuleList()
        for i in range(0, ln.size - 1):
            n = ln[i]
            m = ln[i + 1]

            # construct fully connected operator
            LL = nn.Linear(int(n), int(m), bias=True)

            # initialize the weights
            # with torch.no_grad():
            # custom Xavier input, output or two-sided fill
            mean = 0.0  # std_dev = np.sqrt(variance)
            std_dev = np.sqrt(2 / (m + n))  # np.sqrt(1 / m) # np.sqrt(1 / n)
            W = np.random.normal(mean, std_dev, size=(m, n)).astype(np.float32)
            std_dev = np.sqrt(1 / m)  # np.sqrt(2 / (m + 1))
            bt = np.random.normal(mean, std_dev, size=m).astype(np.float32)
            # approach 1
            LL.weight.data = torch.tensor(W, requires_grad=True)
            LL.bias.data = torch.tensor(bt, requires_grad=True)
            # approach 2
            # LL.weight.data.copy_(torch.tensor(W))
            # LL.bias.data.copy_(torch.tensor(bt))
            # approach 3
            # LL.weight = Parameter(torch.tensor(W),requires_grad=True)
            # LL.bias = Parameter(torch.tensor(bt),requires_grad=True)
            layers.append(LL)

            # construct sigmoid or relu operator
            if i == sigmoid_layer:
                layers.append(nn.Sigmoid())
            else:
                layers.append(nn.ReLU())

        # approach 1: use ModuleList
        # return layers
        # approach 2: use Sequential container to wrap all layers
        return torch.nn.Sequential(*layers)

    def create_emb(self, m, ln, weighted_pooling=None):
        emb_l = nn.ModuleList()
        v_W_l = []
        for i in range(0, ln.size):
            n = ln[i]

            # construct embedding operator
            EE = nn.EmbeddingBag(n, m, mode="sum")
            # initialize embeddings
            # nn.init.uniform_(EE.in_W, a=-np.sqrt(1 / n), b=np.sqrt(1 / n))
            W = np.random.uniform(low=-np.sqrt(1 / n), high=np.sqrt(1 / n), size=(n, m)).astype(np.float32)
            # approach 1
            EE.weight.data = torch.tensor(W, requires_grad=True)
            # approach 2
            # EE.weight.data.copy_(torch.tensor(W))
            # approach 3
            # EE.weight = Parameter(torch.tensor(W),requires_grad=True)
            if weighted_pooling is None:
                v_W_l.append(None)
            else:
                v_W_l.append(torch.ones(n, dtype=torch.float32))
            emb_l.append(EE)
        return emb_l, v_W_l

    def __init__(
        self,
        m_spa=None,
        ln_emb=None,
        ln_bot=None,
        ln_top=None,
        arch_interaction_op=None,
        arch_interaction_itself=False,
        sigmoid_bot=-1,
        sigmoid_top=-1,
        loss_threshold=0.0,
        weighted_pooling=None,
    ):
        super(DLRM_Net, self).__init__()  # noqa: UP008

        if (
            (m_spa is not None)
            and (ln_emb is not None)
            and (ln_bot is not None)
            and (ln_top is not None)
            and (arch_interaction_op is not None)
        ):
            # save arguments
            self.output_d = 0
            self.parallel_model_batch_size = -1
            self.parallel_model_is_not_prepared = True
            self.arch_interaction_op = arch_interaction_op
            self.arch_interaction_itself = arch_interaction_itself
            self.loss_threshold = loss_threshold
            if weighted_pooling is not None and weighted_pooling != "fixed":
                self.weighted_pooling = "learned"
            else:
                self.weighted_pooling = weighted_pooling

            # create operators
            self.emb_l, w_list = self.create_emb(m_spa, ln_emb, weighted_pooling)
            if self.weighted_pooling == "learned":
                self.v_W_l = nn.ParameterList()
                for w in w_list:
                    self.v_W_l.append(nn.Parameter(w))
            else:
                self.v_W_l = w_list
            self.bot_l = self.create_mlp(ln_bot, sigmoid_bot)
            self.top_l = self.create_mlp(ln_top, sigmoid_top)

    def apply_mlp(self, x, layers):
        # approach 1: use ModuleList
        # for layer in layers:
        #     x = layer(x)
        # return x
        # approach 2: use Sequential container to wrap all layers
        return layers(x)

    def apply_emb(self, lS_o, lS_i, emb_l, v_W_l):
        # WARNING: notice that we are processing the batch at once. We implicitly
        # assume that the data is laid out such that:
        # 1. each embedding is indexed with a group of sparse indices,
        #   corresponding to a single lookup
        # 2. for each embedding the lookups are further organized into a batch
        # 3. for a list of embedding tables there is a list of batched lookups

        ly = []
        for k, sparse_index_group_batch in enumerate(lS_i):
            sparse_offset_group_batch = lS_o[k]

            # embedding lookup
            # We are using EmbeddingBag, which implicitly uses sum operator.
            # The embeddings are represented as tall matrices, with sum
            # happening vertically across 0 axis, resulting in a row vector
            # E = emb_l[k]

            if v_W_l[k] is not None:
                per_sample_weights = v_W_l[k].gather(0, sparse_index_group_batch)
            else:
                per_sample_weights = None

            E = emb_l[k]
            V = E(
                sparse_index_group_batch,
                sparse_offset_group_batch,
                per_sample_weights=per_sample_weights,
            )

            ly.append(V)

        # print(ly)
        return ly

    def interact_features(self, x, ly):
        if self.arch_interaction_op == "dot":
            # concatenate dense and sparse features
            (batch_size, d) = x.shape
            T = torch.cat([x] + ly, dim=1).view((batch_size, -1, d))
            # perform a dot product
            Z = torch.bmm(T, torch.transpose(T, 1, 2))
            # append dense feature with the interactions (into a row vector)
            # approach 1: all
            # Zflat = Z.view((batch_size, -1))
            # approach 2: unique
            _, ni, nj = Z.shape
            # approach 1: tril_indices
            # offset = 0 if self.arch_interaction_itself else -1
            # li, lj = torch.tril_indices(ni, nj, offset=offset)
            # approach 2: custom
            offset = 1 if self.arch_interaction_itself else 0
            li = torch.tensor([i for i in range(ni) for j in range(i + offset)])
            lj = torch.tensor([j for i in range(nj) for j in range(i + offset)])
            Zflat = Z[:, li, lj]
            # concatenate dense features and interactions
            R = torch.cat([x] + [Zflat], dim=1)
        elif self.arch_interaction_op == "cat":
            # concatenation features (into a row vector)
            R = torch.cat([x] + ly, dim=1)
        else:
            sys.exit("ERROR: --arch-interaction-op=" + self.arch_interaction_op + " is not supported")

        return R

    def forward(self, dense_x, lS_o, lS_i):
        return self.sequential_forward(dense_x, lS_o, lS_i)

    def sequential_forward(self, dense_x, lS_o, lS_i):
        # process dense features (using bottom mlp), resulting in a row vector
        x = self.apply_mlp(dense_x, self.bot_l)
        # debug prints
        # print("intermediate")
        # print(x.detach().cpu().numpy())

        # process sparse features(using embeddings), resulting in a list of row vectors
        ly = self.apply_emb(lS_o, lS_i, self.emb_l, self.v_W_l)
        # for y in ly:
        #     print(y.detach().cpu().numpy())

        # interact features (dense and sparse)
        z = self.interact_features(x, ly)
        # print(z.detach().cpu().numpy())

        # obtain probability of a click (using top mlp)
        p = self.apply_mlp(z, self.top_l)

        # clamp output if needed
        if 0.0 < self.loss_threshold and self.loss_threshold < 1.0:
            z = torch.clamp(p, min=self.loss_threshold, max=(1.0 - self.loss_threshold))
        else:
            z = p

        return z


class Model(nn.Module):
    """DLRM_Net as dlrm_s_pytorch.py's main builds it from the --arch-* strings (dot interaction)."""

    def __init__(self, m_spa, ln_emb, arch_mlp_bot, arch_mlp_top):
        super().__init__()
        ln_emb = np.asarray(ln_emb)
        num_fea = ln_emb.size + 1  # num sparse + num dense features
        ln_bot = np.fromstring(arch_mlp_bot, dtype=int, sep="-")
        m_den_out = ln_bot[ln_bot.size - 1]
        num_int = (num_fea * (num_fea - 1)) // 2 + m_den_out
        arch_mlp_top_adjusted = str(num_int) + "-" + arch_mlp_top
        ln_top = np.fromstring(arch_mlp_top_adjusted, dtype=int, sep="-")
        self.dlrm = DLRM_Net(
            m_spa,
            ln_emb,
            ln_bot,
            ln_top,
            arch_interaction_op="dot",
            arch_interaction_itself=False,
            sigmoid_bot=-1,
            sigmoid_top=ln_top.size - 2,
            loss_threshold=0.0,
        )

    def forward(self, dense_x, lS_o, lS_i):
        return self.dlrm(dense_x, lS_o, lS_i)


batch_size = 64
num_dense = 13
m_spa = 16
ln_emb = [4000, 1000, 100, 2500, 300, 1500, 800, 200]
num_indices_per_lookup = 3
arch_mlp_bot = "13-64-32-16"
arch_mlp_top = "64-1"


def get_inputs():
    dense_x = torch.rand(batch_size, num_dense)
    lS_o = torch.stack([torch.arange(batch_size, dtype=torch.long) * num_indices_per_lookup for _ in ln_emb])
    lS_i = torch.stack([torch.randint(0, n, (batch_size * num_indices_per_lookup,), dtype=torch.long) for n in ln_emb])
    return [dense_x, lS_o, lS_i]


def get_init_inputs():
    return [m_spa, ln_emb, arch_mlp_bot, arch_mlp_top]
