#!/usr/bin/env bash
# Issue 7 on a device machine with two or more GPUs (nvidia-h200-x2): the gpu worker pool, one
# Celery worker per GPU, with the real sandbox on the cuda backend. Prepare here first:
#   bash scripts/device_bundle.sh        # .whl (Django, Celery, Channels, ... for Python 3.12), .redis
# then, in one device call with carry [".whl", ".redis"]:  bash scripts/gpu_pool_session.sh
# Stages (each time-boxed; summary.txt printed last, logs and run tables under $OUT):
#   tests  pytest -m gpu tests/webapp/test_gpu_pool.py: two jobs, a batch, and both at once,
#          spread over gpu0/gpu1 pinned with CUDA_VISIBLE_DEVICES; each evaluation's GPU UUID
#   bench  benchmarks.pool_bench --backend cuda: jobs/hour with 1 and 2 gpu workers (one evaluation per
#          GPU), then 2 workers with two evaluations per GPU (the `./kw run` default)
#   pinning the same without and with --timing-cpus (a timing CPU per GPU, as `./kw run` sets up)
set -u
OUT=${OUT:-/tmp/kw-out}; mkdir -p "$OUT/logs"
# KINDS.md: NVLink multicast stays off on the multi-GPU kinds, in every process we start too.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 KERNELWRIGHT_CACHE=/tmp/kw-cache
LOGS="$OUT/logs"; . "$(dirname "$0")/stages.sh"
if [ -z "${KW_NO_WHEELS:-}" ]; then  # KW_NO_WHEELS=1: a dry run where python3 already has the web stack
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    || { note "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site
fi
export PATH="$PWD/.redis:$PATH"
port=${KW_REDIS_PORT:-6379}
note "$(nvidia-smi --query-gpu=index,name,uuid,pci.bus_id --format=csv,noheader | tr '\n' ';')"
note "$(python3 -c 'import torch, django, celery, channels, daphne; print("torch", torch.__version__, "gpus", torch.cuda.device_count(), "django", django.__version__, "celery", celery.__version__)' 2>&1 | tail -1)"
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes --logfile "$OUT/logs/redis.log" \
  || { note "redis-server did not start"; exit 1; }
for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.2; done
export REDIS_URL=redis://127.0.0.1:$port/0
stages=${*:-"tests bench"}
for s in $stages; do case $s in
  tests) run_stage tests 330 python3 -m pytest -m gpu tests/webapp/test_gpu_pool.py -v -s -rs --tb=short -p no:cacheprovider
         cp artifacts/gpu-pool/*.txt "$OUT/logs/" 2>/dev/null ;;
  bench) run_stage bench1 170 python3 -m benchmarks.pool_bench --backend cuda --workers 1 2 --jobs ${KW_POOL_JOBS:-8} \
           --evals-per-job 4 --out "$OUT/pool-bench-1-per-gpu.json"
         run_stage bench2 100 python3 -m benchmarks.pool_bench --backend cuda --workers 2 --evals-per-gpu 2 \
           --jobs ${KW_POOL_JOBS:-8} --evals-per-job 4 --out "$OUT/pool-bench-2-per-gpu.json" ;;
  # the host-load effect on host-bound timing, without and with a timing CPU per GPU (sandbox.placement)
  pinning) for variant in "1 2|" "1 2|--timing-cpus" "2|--evals-per-gpu 2 --timing-cpus" "2|--evals-per-gpu 2"; do
             workers=${variant%%|*}; extra=${variant#*|}; tag=$(echo "w${workers}${extra}" | tr -cd 'a-z0-9')
             run_stage "pin-$tag" 150 python3 -m benchmarks.pool_bench --backend cuda --workers $workers $extra \
               --jobs ${KW_POOL_JOBS:-8} --evals-per-job 4 --out "$OUT/pool-$tag.json"
           done ;;
  # spares create their CUDA context under the device lock (sandbox/worker.py early_device_init):
  # one vs two evaluations per GPU again, and the sandbox's GPU tests with that change
  ctxlock) run_stage gputests 200 python3 -m pytest -m "gpu and not slow" tests/sandbox -q -x -rfE --tb=short -p no:cacheprovider
           for variant in "2|--evals-per-gpu 2" "2|" "2|--evals-per-gpu 2 --timing-cpus"; do
             workers=${variant%%|*}; extra=${variant#*|}; tag=$(echo "w${workers}${extra}" | tr -cd 'a-z0-9')
             run_stage "ctx-$tag" 120 python3 -m benchmarks.pool_bench --backend cuda --workers $workers $extra \
               --jobs ${KW_POOL_JOBS:-8} --evals-per-job 4 --out "$OUT/ctx-$tag.json"
           done ;;
esac; done
pkill -f "redis-server.bin.*:$port" || true
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
echo "==== summary"; cat "$summary"
