"""NeRF's positional encoding and MLP as yenchenlin/nerf-pytorch's run_nerf_helpers.py and run_nerf.py write them
(master, 2020-2022), configured as the default config (use_viewdirs=True, multires=10, multires_views=4, i_embed=0,
netdepth=8, netwidth=256, skips=[4], N_importance > 0 so output_ch=5, netchunk=1024*64): get_embedder builds an
Embedder (not an nn.Module) whose embed_fns are `lambda x : x` (include_input) and one
`lambda x, p_fn=p_fn, freq=freq : p_fn(x * freq)` per frequency 2.**torch.linspace(0., max_freq, steps=N_freqs)
(log_sampling) and per function of [torch.sin, torch.cos], torch.cat'ed on the last axis; run_network flattens the
[N_rays, N_samples, 3] points, embeds them, expands the view directions viewdirs[:,None].expand(inputs.shape),
embeds those, cats both, and batchify runs the NeRF MLP over chunks of netchunk rows (torch.cat of the chunks); NeRF
splits its input with torch.split([input_ch, input_ch_views]), runs 8 Linear + F.relu layers with the points cat'ed
back in (`torch.cat([input_pts, h], -1)`) after layer 4, then alpha_linear, feature_linear, cat with the embedded
view directions, one views_linear + relu (the official release's single layer), rgb_linear and
`torch.cat([rgb, alpha], -1)`; the result reshaped to [N_rays, N_samples, 4]. Sizes smaller than the default's
(netwidth 256, 1024 rays x 64 coarse samples per batch): netwidth 128, 32 rays x 32 samples. Changed: the
config's fields passed as arguments; the rays, their normalised view directions and the stratified samples
(render / render_rays' job, without the perturbation) made in get_inputs."""

import torch
import torch.nn as nn
import torch.nn.functional as F


# Positional encoding (section 5.1)
class Embedder:
    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.create_embedding_fn()

    def create_embedding_fn(self):
        embed_fns = []
        d = self.kwargs["input_dims"]
        out_dim = 0
        if self.kwargs["include_input"]:
            embed_fns.append(lambda x: x)
            out_dim += d

        max_freq = self.kwargs["max_freq_log2"]
        N_freqs = self.kwargs["num_freqs"]

        if self.kwargs["log_sampling"]:
            freq_bands = 2.0 ** torch.linspace(0.0, max_freq, steps=N_freqs)
        else:
            freq_bands = torch.linspace(2.0**0.0, 2.0**max_freq, steps=N_freqs)

        for freq in freq_bands:
            for p_fn in self.kwargs["periodic_fns"]:
                embed_fns.append(lambda x, p_fn=p_fn, freq=freq: p_fn(x * freq))
                out_dim += d

        self.embed_fns = embed_fns
        self.out_dim = out_dim

    def embed(self, inputs):
        return torch.cat([fn(inputs) for fn in self.embed_fns], -1)


def get_embedder(multires, i=0):
    if i == -1:
        return nn.Identity(), 3

    embed_kwargs = {
        "include_input": True,
        "input_dims": 3,
        "max_freq_log2": multires - 1,
        "num_freqs": multires,
        "log_sampling": True,
        "periodic_fns": [torch.sin, torch.cos],
    }

    embedder_obj = Embedder(**embed_kwargs)
    embed = lambda x, eo=embedder_obj: eo.embed(x)  # noqa: E731
    return embed, embedder_obj.out_dim


# Model
class NeRF(nn.Module):
    def __init__(self, D=8, W=256, input_ch=3, input_ch_views=3, output_ch=4, skips=[4], use_viewdirs=False):  # noqa: B006
        """ """
        super(NeRF, self).__init__()  # noqa: UP008
        self.D = D
        self.W = W
        self.input_ch = input_ch
        self.input_ch_views = input_ch_views
        self.skips = skips
        self.use_viewdirs = use_viewdirs

        self.pts_linears = nn.ModuleList(
            [nn.Linear(input_ch, W)]
            + [nn.Linear(W, W) if i not in self.skips else nn.Linear(W + input_ch, W) for i in range(D - 1)]
        )

        ### Implementation according to the official code release (https://github.com/bmild/nerf/blob/master/run_nerf_helpers.py#L104-L105)
        self.views_linears = nn.ModuleList([nn.Linear(input_ch_views + W, W // 2)])

        ### Implementation according to the paper
        # self.views_linears = nn.ModuleList(
        #     [nn.Linear(input_ch_views + W, W//2)] + [nn.Linear(W//2, W//2) for i in range(D//2)])

        if use_viewdirs:
            self.feature_linear = nn.Linear(W, W)
            self.alpha_linear = nn.Linear(W, 1)
            self.rgb_linear = nn.Linear(W // 2, 3)
        else:
            self.output_linear = nn.Linear(W, output_ch)

    def forward(self, x):
        input_pts, input_views = torch.split(x, [self.input_ch, self.input_ch_views], dim=-1)
        h = input_pts
        for i, l in enumerate(self.pts_linears):  # noqa: B007, E741
            h = self.pts_linears[i](h)
            h = F.relu(h)
            if i in self.skips:
                h = torch.cat([input_pts, h], -1)

        if self.use_viewdirs:
            alpha = self.alpha_linear(h)
            feature = self.feature_linear(h)
            h = torch.cat([feature, input_views], -1)

            for i, l in enumerate(self.views_linears):  # noqa: B007, E741
                h = self.views_linears[i](h)
                h = F.relu(h)

            rgb = self.rgb_linear(h)
            outputs = torch.cat([rgb, alpha], -1)
        else:
            outputs = self.output_linear(h)

        return outputs


def batchify(fn, chunk):
    """Constructs a version of 'fn' that works on smaller input."""
    if chunk is None:
        return fn

    def ret(inputs):
        return torch.cat([fn(inputs[i : i + chunk]) for i in range(0, inputs.shape[0], chunk)], 0)

    return ret


def run_network(inputs, viewdirs, fn, embed_fn, embeddirs_fn, netchunk=1024 * 64):
    """Prepares inputs and applies network 'fn'."""
    inputs_flat = torch.reshape(inputs, [-1, inputs.shape[-1]])
    embedded = embed_fn(inputs_flat)

    if viewdirs is not None:
        input_dirs = viewdirs[:, None].expand(inputs.shape)
        input_dirs_flat = torch.reshape(input_dirs, [-1, input_dirs.shape[-1]])
        embedded_dirs = embeddirs_fn(input_dirs_flat)
        embedded = torch.cat([embedded, embedded_dirs], -1)

    outputs_flat = batchify(fn, netchunk)(embedded)
    outputs = torch.reshape(outputs_flat, list(inputs.shape[:-1]) + [outputs_flat.shape[-1]])
    return outputs


class Model(nn.Module):
    """create_nerf's coarse model and its network_query_fn, called as render_rays calls it on the sampled points."""

    def __init__(self, multires, multires_views, netdepth, netwidth, netchunk):
        super().__init__()
        embed_fn, input_ch = get_embedder(multires, 0)
        embeddirs_fn, input_ch_views = get_embedder(multires_views, 0)
        output_ch = 5  # N_importance > 0
        skips = [4]
        self.model = NeRF(
            D=netdepth,
            W=netwidth,
            input_ch=input_ch,
            output_ch=output_ch,
            skips=skips,
            input_ch_views=input_ch_views,
            use_viewdirs=True,
        )
        self.network_query_fn = lambda inputs, viewdirs, network_fn: run_network(
            inputs, viewdirs, network_fn, embed_fn=embed_fn, embeddirs_fn=embeddirs_fn, netchunk=netchunk
        )

    def forward(self, pts, viewdirs):
        # raw = network_query_fn(pts, viewdirs, network_fn)
        return self.network_query_fn(pts, viewdirs, self.model)


N_rays = 32
N_samples = 32
multires = 10
multires_views = 4
netdepth = 8
netwidth = 128
netchunk = 1024 * 64
near, far = 2.0, 6.0


def get_inputs():
    rays_o = torch.randn(N_rays, 3)
    rays_d = torch.randn(N_rays, 3)
    viewdirs = rays_d / torch.norm(rays_d, dim=-1, keepdim=True)
    t_vals = torch.linspace(0.0, 1.0, steps=N_samples)
    z_vals = near * (1.0 - t_vals) + far * (t_vals)
    z_vals = z_vals.expand([N_rays, N_samples])
    pts = rays_o[..., None, :] + rays_d[..., None, :] * z_vals[..., :, None]  # [N_rays, N_samples, 3]
    return [pts, viewdirs]


def get_init_inputs():
    return [multires, multires_views, netdepth, netwidth, netchunk]
