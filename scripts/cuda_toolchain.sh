#!/usr/bin/env bash
# nvcc without a GPU: the CUDA 13.0 compiler, its headers and cuBLAS from NVIDIA's PyPI wheels,
# unpacked into .cuda/ (git-ignored; about 600 MB). Compiling needs no GPU, so the CUDA code the
# built-in policy generates is checked by nvcc here and in CI (tests marked `nvcc`,
# python -m benchmarks.cuda_compile) before any device time is spent on it. The versions match
# the device image's CUDA 13. Idempotent: an existing .cuda/bin/nvcc is kept.
#   bash scripts/cuda_toolchain.sh        then: export PATH=$PWD/.cuda/bin:$PATH (the tests find it)
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.cuda
if [ -x "$DEST/bin/nvcc" ] && "$DEST/bin/nvcc" --version >/dev/null 2>&1; then
    echo "[cuda] $DEST/bin/nvcc is there: $("$DEST/bin/nvcc" --version | tail -1)"
    exit 0
fi
PIP="${PIP:-$( [ -x .venv/bin/pip ] && echo .venv/bin/pip || echo "python3 -m pip")}"
WHEELS=(
    nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88
    nvidia-cuda-runtime==13.0.88 nvidia-cuda-cccl==13.0.85 nvidia-cublas==13.0.0.19
)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "[cuda] downloading ${WHEELS[*]}"
$PIP download -q --no-deps --only-binary=:all: --platform manylinux_2_27_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux_2_12_x86_64 -d "$tmp/whl" "${WHEELS[@]}"
for w in "$tmp"/whl/*.whl; do
    python3 -m zipfile -e "$w" "$tmp/x"
done
rm -rf "$DEST"
rm -f "$tmp"/x/nvidia/cu13/lib/libnvblas.*  # not linked by anything here
mv "$tmp/x/nvidia/cu13" "$DEST"
chmod +x "$DEST"/bin/* "$DEST"/nvvm/bin/*
ln -sfn lib "$DEST/lib64"  # where nvcc.profile looks for libraries
for lib in cublas cublasLt cudart; do  # the unversioned names the linker looks for
    real=$(ls "$DEST"/lib/lib$lib.so.* 2>/dev/null | head -1) && ln -sf "$(basename "$real")" "$DEST/lib/lib$lib.so"
done
echo "[cuda] $("$DEST/bin/nvcc" --version | tail -1) in $DEST"
