"""Task synthesis (`python -m benchmarks.synthesize`): operators mined from torch (and
transformers when installed) composed into KernelBench-format tasks, kept only when they run
under eager and torch.compile, are deterministic, take a useful time and are unlike every
KernelBench problem. `ops` mines, `compose` writes tasks, `similarity` compares them with
KernelBench, `checks` runs them. No Django here."""
