"""CUDA graphs in candidates: the capture shared by every graphed forward, and the graphed
reference (the task's own forward replayed as one graph).

Text only (this module imports no torch): the helpers are written into model_new.py, which runs
in the sandbox. A graph replay issues every kernel of a forward with one launch; where launching
op by op costs more than the kernels take (many small ops, a recurrent layer's per-step kernels),
that is the speedup, with the same kernels and the same arithmetic. Every call copies its inputs
into the graph's buffers and its result out, so it computes afresh and returns a new tensor.
"""

from __future__ import annotations

TAG = "[CUDA graph]"  # ends the label of every graphed candidate (the KernelBench table counts them)

CAPTURE_HELPER = '''

class _KwHostConstants(torch.overrides.TorchFunctionMode):
    """`torch.tensor` / `torch.as_tensor` of Python numbers onto the GPU inside a forward (SwinV2's
    `torch.tensor(1. / 0.01, device=x.device)`) copies from the host, which a capture forbids. In the
    warm-up call (`kept` None) each such tensor is kept, in call order; in the capture the same call
    (the same arguments) gets a device copy of the kept one, a kernel the graph replays. The value
    is a constant of the graph, as every Python value the forward reads is. Entered and left inside
    one call, so no mode stays active outside it."""

    def __init__(self, kept=None):
        super().__init__()
        self.recording, self.kept, self.next = kept is None, [] if kept is None else kept, 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in (torch.tensor, torch.as_tensor) or not args or not _kw_numbers(args[0]):
            return func(*args, **kwargs)
        key = repr((args, sorted(kwargs.items())))
        if self.recording:
            out = func(*args, **kwargs)
            if out.device.type != "cpu":
                self.kept.append((key, out.clone()))
            return out
        if self.next < len(self.kept) and self.kept[self.next][0] == key:
            self.next += 1
            return self.kept[self.next - 1][1].clone()
        return func(*args, **kwargs)


def _kw_numbers(data):
    """A Python number, or a (nested) list or tuple of them."""
    if isinstance(data, (list, tuple)):
        return all(_kw_numbers(x) for x in data)
    return isinstance(data, (bool, int, float))


def _capture(eager, static_in):
    """(graph, its input buffers, its output buffer), over the caller's input buffers `static_in`
    (every replay copies the call's inputs into them first). One eager call on a side stream first,
    as PyTorch's CUDA-graph notes ask: cuBLAS and cuDNN set up handles, workspaces and algorithms
    outside the capture, and derived weights are computed then and read by the graph; the call's
    tensors made from Python numbers are kept for the capture (`_KwHostConstants`)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    constants = _KwHostConstants()
    with torch.cuda.stream(side), constants:
        eager(*static_in)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    graph.kw_constants = constants.kept  # every replay reads them
    with torch.cuda.graph(graph), _KwHostConstants(constants.kept):
        static_out = eager(*static_in)
    if not (isinstance(static_out, torch.Tensor) and static_out.is_contiguous()):
        return None, None, None
    return graph, static_in, static_out
'''

REFERENCE_HELPER = '''

def _kw_graphed_reference(module, eager, inputs):
    """The reference's forward as one CUDA graph replay per input signature (shapes, dtypes,
    strides, non-tensor values). Recaptured when any parameter's or buffer's storage or version
    changes; inputs that are not all CUDA tensors, autograd, or a result that is not one contiguous
    tensor take the reference's forward op by op."""
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    if not tensors or not all(t.is_cuda for t in tensors) or torch.is_grad_enabled():
        return eager(*inputs)
    state = module.__dict__.get("_kw_state")
    if state is None:
        state = module.__dict__["_kw_state"] = [*module.parameters(), *module.buffers()]
    wkey = [(w.data_ptr(), w._version) for w in state]
    key = tuple((tuple(t.shape), t.dtype, t.stride()) if isinstance(t, torch.Tensor) else t for t in inputs)
    graphs = module.__dict__.setdefault("_kw_graphs", {})
    entry = graphs.get(key)
    if entry is None or entry[0] != wkey:
        # copies of the first inputs, not empty buffers: the reference may index by an input
        entry = graphs[key] = (wkey, *_capture(eager, [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]))
    _, graph, static_in, static_out = entry
    if graph is None:
        return eager(*inputs)
    for dst, src in zip(static_in, inputs):
        if isinstance(src, torch.Tensor):
            dst.copy_(src)
    graph.replay()
    return static_out.clone()
'''
