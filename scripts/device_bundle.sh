#!/usr/bin/env bash
# Prepare, on this machine, what a device call of the web stack needs and the device image lacks
# (it has torch, pytest and numpy, but no Django, Celery, Channels, Redis): Python 3.12 wheels in
# .whl/ and a redis-server with its libraries in .redis/ (both git-ignored; name them in the
# device call's `carry`). Used by scripts/gpu_pool_session.sh (issue 7: the pool on two GPUs).
# Packages the image already has (KINDS.md) are left out, so they are not shadowed there.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .whl .redis
mkdir -p .whl .redis/lib
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl \
    "django>=5.2,<5.3" "channels>=4.1" "channels-redis>=4.2" "daphne>=4.1" "celery[redis]>=5.4" "redis>=5.0" \
    "plotly>=5.20" "whitenoise>=6.6" "dj-database-url>=2.1" "pytest-django>=4.8" "openai>=1.40"
for present in pytest pluggy iniconfig packaging pygments six python_dateutil idna h11 anyio sniffio attrs \
               click-8 typing_extensions narwhals msgpack; do
    rm -f .whl/"$present"-*.whl
done
# redis-server from this machine's package, with every library it links except the C and C++
# runtimes (the device's glibc is newer; LD_LIBRARY_PATH is set for redis-server alone).
server=$(command -v redis-server) || { echo "no redis-server here: apt-get install -y redis-server" >&2; exit 1; }
cp "$(readlink -f "$server")" .redis/redis-server.bin
ldd .redis/redis-server.bin | awk '/=> \// {print $3}' | grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' \
    | while read -r lib; do cp -L "$lib" .redis/lib/; done
cat > .redis/redis-server <<'WRAP'
#!/bin/sh
here=$(dirname "$(readlink -f "$0")")
LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/redis-server.bin" "$@"
WRAP
chmod +x .redis/redis-server
.redis/redis-server --version
du -sh .whl .redis
