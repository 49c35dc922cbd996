#!/usr/bin/env python3
"""Power-loss crash states of a ckptfs command, from a recorded system-call trace.

The method is ALICE's (Pillai et al., OSDI 2014): run the real command once under strace,
rebuild the file system's history from the trace, and construct the states a machine could
come back in had power failed after any of its steps. A state keeps what was made durable and
loses the rest:

* a file's bytes are durable as of its last fsync/fdatasync (through any descriptor), or any
  syncfs/sync after them;
* a directory's entries (create, rename, link, unlink, mkdir) are durable as of that
  directory's last fsync, or any syncfs/sync;
* what was not made durable may or may not have reached the disk. Two states per step are
  built: "synced" (nothing unsynced survives: directories as of their last fsync, files as of
  theirs) and "journaled" (every directory operation survives, file bytes only as synced: what
  ext4's ordered mode with delayed allocation allows, the zero-length-file-after-rename case).
  Between the two lie the states where part of the unsynced directory operations reached the
  disk; the two bounds are what the checks below depend on (a record or ref that is there
  while its bytes or its objects are not), so they are the ones built.

Each state is written out as real directories in place of the tracked ones (so the paths a
marker or STORE.json records name the state, as after a reboot), and the checks run on it:
`ckptfs recover`, then `ckptfs verify` (every object every record reaches is present and
hashes right), `branch list` and `log` (the store is usable), then the branch heads must be
the old or the new one, each naming a record that is there, and the test's own checks.
Nothing here is ckptfs-specific except the checks.

Usage (the tests in tests/it/health/powerloss.rs drive it):

  crashsim.py --ckptfs BIN --store DIR --work DIR [--track DIR]... [--head B=ID,ID]...
              (an ID of "@after" is the head once the command is done, "none" no branch)
              [--check JSON_ARGV]... [--before-checks JSON_ARGV]... [--max-points N]
              [--keep] [--remap-inodes] -- COMMAND...

--max-points N spreads N crash points over the run (0: every step, the long sweep).

Prints one JSON object: steps, points, states and failures (each with the step, the state
kind, the check and its output). Exit 0 when it ran (failures or not), 2 on a usage error.
"""

import argparse
import json
import os
import re
import shutil
import stat
import subprocess
import sys

# ---------------------------------------------------------------------------------------------
# The model: inodes, directories with current and durable entries, files with current and
# durable bytes.


class Inode:
    __slots__ = ("kind", "data", "durable", "entries", "durable_entries", "target", "mode",
                 "real_ino")

    def __init__(self, kind, mode=0o644):
        self.kind = kind  # "file", "dir", "link"
        self.mode = mode
        self.data = bytearray()
        self.durable = b""
        self.entries = {}
        self.durable_entries = {}
        self.target = b""
        self.real_ino = None  # its inode number in the real run, once a traced stat showed it


class Model:
    def __init__(self, roots):
        # roots: {real path: Inode of its directory}
        self.roots = roots
        self.all = []
        for r in roots.values():
            self._collect(r)

    def _collect(self, ino):
        self.all.append(ino)
        for child in ino.entries.values():
            if child.kind == "dir":
                self._collect(child)
            else:
                self.all.append(child)

    def split(self, path):
        """(root inode, [components]) for a path under a tracked root, else None."""
        for root, ino in self.roots.items():
            if path == root:
                return ino, []
            if path.startswith(root + "/"):
                rest = [c for c in path[len(root) + 1:].split("/") if c not in ("", ".")]
                return ino, rest
        return None

    def lookup(self, path):
        s = self.split(path)
        if s is None:
            return None
        ino, parts = s
        for p in parts:
            if ino.kind != "dir" or p not in ino.entries:
                return None
            ino = ino.entries[p]
        return ino

    def parent(self, path):
        """(parent dir inode, name) for a path under a tracked root, else None."""
        s = self.split(path)
        if s is None or not s[1]:
            return None
        ino, parts = s
        for p in parts[:-1]:
            if ino.kind != "dir" or p not in ino.entries:
                return None
            ino = ino.entries[p]
        if ino.kind != "dir":
            return None
        return ino, parts[-1]

    def new(self, kind, mode=0o644):
        ino = Inode(kind, mode)
        self.all.append(ino)
        return ino

    def sync_all(self):
        for ino in self.all:
            if ino.kind == "dir":
                ino.durable_entries = dict(ino.entries)
            else:
                ino.durable = bytes(ino.data)


def load_tree(path):
    """The tree at `path` as inodes, everything durable (it is on disk before the command)."""
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode):
        ino = Inode("dir", stat.S_IMODE(st.st_mode))
        for name in sorted(os.listdir(path)):
            ino.entries[name] = load_tree(os.path.join(path, name))
        ino.durable_entries = dict(ino.entries)
    elif stat.S_ISLNK(st.st_mode):
        ino = Inode("link")
        ino.target = os.fsencode(os.readlink(path))
    else:
        ino = Inode("file", stat.S_IMODE(st.st_mode))
        if stat.S_ISREG(st.st_mode):
            with open(path, "rb") as f:
                ino.data = bytearray(f.read())
        ino.durable = bytes(ino.data)
    return ino


# ---------------------------------------------------------------------------------------------
# The trace: strace -f -y -qq -e write=all, one event per completed system call.

LINE = re.compile(r"^(\d+) +(\w+)\((.*)\) += (-?\d+|\?)(?:<([^>]*)>)?")
FD_PATH = re.compile(r"(-?\d+|AT_FDCWD)<([^>]*)>")
INO = re.compile(r"\bstx?_ino=(\d+)")
HEX = re.compile(r"^ \| [0-9a-f]{5}  (.{49})")

def unquote(s):
    """A strace string argument ("...") as bytes."""
    s = s.strip()
    if not s.startswith('"'):
        return None
    body = s[1:s.rindex('"')]
    out = bytearray()
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            n = body[i + 1]
            if n == "x":
                out.append(int(body[i + 2:i + 4], 16))
                i += 4
                continue
            if n in "01234567":
                j = i + 1
                while j < len(body) and j < i + 4 and body[j] in "01234567":
                    j += 1
                out.append(int(body[i + 1:j], 8))
                i = j
                continue
            out += {"n": b"\n", "t": b"\t", "r": b"\r", "v": b"\v", "f": b"\f",
                    '"': b'"', "\\": b"\\"}.get(n, n.encode())
            i += 2
            continue
        out += c.encode()
        i += 1
    return bytes(out)


def split_args(s):
    """Top-level comma-separated arguments of a strace call."""
    out, depth, cur, q = [], 0, "", False
    i = 0
    while i < len(s):
        c = s[i]
        if q:
            cur += c
            if c == "\\":
                cur += s[i + 1]
                i += 1
            elif c == '"':
                q = False
        elif c == '"':
            q = True
            cur += c
        elif c in "[{(<":
            depth += 1
            cur += c
        elif c in "]})>":
            depth -= 1
            cur += c
        elif c == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += c
        i += 1
    if cur.strip():
        out.append(cur.strip())
    return out


def events(trace_path):
    """[pid, call, args, ret, ret_path, data] per completed call, in completion order."""
    out = []
    pending = {}
    last = None
    with open(trace_path, "r", errors="surrogateescape") as f:
        lines = f.read().split("\n")
    for raw in lines:
        m = HEX.match(raw)
        if m and last is not None:
            last[5].extend(bytes.fromhex("".join(m.group(1).split())))
            continue
        if raw.startswith(" * "):
            continue
        if not raw or not raw[0].isdigit():
            continue
        pid, _, rest = raw.partition(" ")
        rest = rest.lstrip()
        if rest.endswith("<unfinished ...>"):
            pending[pid] = rest[: -len("<unfinished ...>")].rstrip()
            continue
        m = re.match(r"<\.\.\. (\w+) resumed>(.*)", rest)
        if m:
            rest = pending.pop(pid, m.group(1) + "(") + m.group(2)
        m = LINE.match(pid + " " + rest)
        if not m:
            continue
        _, call, args, ret, ret_path = m.groups()
        ret = int(ret) if ret != "?" else None
        last = [pid, call, split_args(args), ret, ret_path, bytearray()]
        out.append(last)
    return out

# ---------------------------------------------------------------------------------------------
# Replay


class Replayer:
    def __init__(self, model):
        self.m = model
        self.tables = {}  # pid -> fd table id
        self.offsets = {}  # (table, fd) -> [offset, append, path]
        self.next_table = 0

    def table(self, pid):
        if pid not in self.tables:
            self.tables[pid] = self.next_table
            self.next_table += 1
        return self.tables[pid]

    def path_of(self, arg, dirarg=None):
        """Absolute path of a path argument, relative ones joined to their directory fd."""
        p = unquote(arg)
        if p is None:
            return None
        p = os.fsdecode(p)
        if p.startswith("/"):
            return os.path.normpath(p)
        base = None
        if dirarg is not None:
            m = FD_PATH.match(dirarg)
            if m:
                base = m.group(2)
        if base is None:
            return None
        return os.path.normpath(os.path.join(base, p))

    @staticmethod
    def fd_path(arg):
        m = FD_PATH.match(arg)
        if not m:
            return None, None
        fd = m.group(1)
        path = m.group(2)
        if path.endswith(" (deleted)"):
            path = None
        return (int(fd) if fd != "AT_FDCWD" else None), path

    def create(self, path, mode, trunc):
        pd = self.m.parent(path)
        if pd is None:
            return None
        d, name = pd
        ino = d.entries.get(name)
        if ino is None:
            ino = self.m.new("file", mode & 0o7777)
            d.entries[name] = ino
        elif trunc and ino.kind == "file":
            ino.data = bytearray()
        return ino

    def note_ino(self, call, a):
        """Notes the inode number a stat call showed (strace -v) on the inode it names."""
        m = INO.search(" ".join(a))
        if not m:
            return
        if call == "fstat" or (call != "stat" and call != "lstat" and len(a) > 1
                                and unquote(a[1]) == b""):
            _, path = self.fd_path(a[0])
        elif call in ("stat", "lstat"):
            path = self.path_of(a[0])
        else:
            path = self.path_of(a[1], a[0])
        ino = self.m.lookup(path) if path and self.m.split(path) is not None else None
        if ino is not None:
            ino.real_ino = int(m.group(1))

    def apply(self, ev):
        """Applies one event; returns True when it changed durable-relevant state."""
        pid, call, a, ret, ret_path, data = ev
        m = self.m
        if ret is not None and ret < 0:
            return None
        t = self.table(pid)
        if call in ("clone", "clone3", "fork", "vfork"):
            if ret is None or ret <= 0:
                return None
            child = str(ret)
            flags = " ".join(a)
            if call in ("clone", "clone3") and "CLONE_FILES" in flags:
                self.tables[child] = t
            else:
                nt = self.next_table
                self.next_table += 1
                self.tables[child] = nt
                for (tt, fd), v in list(self.offsets.items()):
                    if tt == t:
                        self.offsets[(nt, fd)] = list(v)
            return None
        if call in ("open", "openat", "openat2", "creat"):
            if ret is None:
                return None
            if call == "open":
                path, flags, mode = self.path_of(a[0]), a[1] if len(a) > 1 else "", a[2] if len(a) > 2 else "0644"
            elif call == "creat":
                path, flags, mode = self.path_of(a[0]), "O_CREAT|O_TRUNC", a[1]
            elif call == "openat":
                path, flags = self.path_of(a[1], a[0]), a[2]
                mode = a[3] if len(a) > 3 else "0644"
            else:
                path = self.path_of(a[1], a[0])
                flags = a[2]
                mm = re.search(r"mode=(0\d+)", flags)
                mode = mm.group(1) if mm else "0644"
            if ret_path:
                path = ret_path if not ret_path.endswith(" (deleted)") else path
            self.offsets[(t, ret)] = [0, "O_APPEND" in flags, path]
            if path is None or m.split(path) is None:
                return None
            changed = None
            if "O_CREAT" in flags or "O_TRUNC" in flags:
                try:
                    mode_i = int(mode, 8)
                except ValueError:
                    mode_i = 0o644
                existed = m.lookup(path) is not None
                ino = self.create(path, mode_i, "O_TRUNC" in flags)
                if ino is not None and (not existed or "O_TRUNC" in flags):
                    changed = "ns" if not existed else "data"
            return changed
        if call == "close":
            fd, _ = self.fd_path(a[0])
            self.offsets.pop((t, fd), None)
            return None
        if call in ("dup", "dup2", "dup3") or (call == "fcntl" and "F_DUPFD" in a[1]):
            fd, _ = self.fd_path(a[0])
            if ret is not None and (t, fd) in self.offsets:
                self.offsets[(t, ret)] = self.offsets[(t, fd)]
            return None
        if call == "lseek":
            fd, _ = self.fd_path(a[0])
            if (t, fd) in self.offsets and ret is not None:
                self.offsets[(t, fd)][0] = ret
            return None
        if call in ("write", "pwrite64", "writev", "pwritev", "pwritev2"):
            fd, path = self.fd_path(a[0])
            if path is None or m.split(path) is None:
                return None
            ino = m.lookup(path)
            if ino is None or ino.kind != "file":
                return None
            st = self.offsets.setdefault((t, fd), [0, False, path])
            n = ret or 0
            if call in ("pwrite64", "pwritev", "pwritev2"):
                off = int(a[-1] if call == "pwrite64" else a[3])
            elif st[1]:
                off = len(ino.data)
            else:
                off = st[0]
            buf = bytes(data[:n])
            if len(buf) < n:
                raise SystemExit(f"crashsim: {call} of {n} bytes to {path} without its data "
                                 "in the trace (run strace with -e write=all)")
            end = off + n
            if len(ino.data) < end:
                ino.data.extend(b"\0" * (end - len(ino.data)))
            ino.data[off:end] = buf
            if call not in ("pwrite64", "pwritev", "pwritev2"):
                st[0] = end
            return "data"
        if call in ("ftruncate", "truncate"):
            if call == "ftruncate":
                _, path = self.fd_path(a[0])
            else:
                path = self.path_of(a[0])
            ino = m.lookup(path) if path else None
            if ino is None or ino.kind != "file":
                return None
            n = int(a[1])
            if n < len(ino.data):
                del ino.data[n:]
            else:
                ino.data.extend(b"\0" * (n - len(ino.data)))
            return "data"
        if call in ("fsync", "fdatasync"):
            _, path = self.fd_path(a[0])
            ino = m.lookup(path) if path else None
            if ino is None:
                return None
            if ino.kind == "dir":
                ino.durable_entries = dict(ino.entries)
            else:
                ino.durable = bytes(ino.data)
            return "sync"
        if call in ("syncfs", "sync"):
            m.sync_all()
            return "sync"
        if call in ("rename", "renameat", "renameat2"):
            if call == "rename":
                src, dst, flags = self.path_of(a[0]), self.path_of(a[1]), ""
            else:
                src, dst = self.path_of(a[1], a[0]), self.path_of(a[3], a[2])
                flags = a[4] if len(a) > 4 else ""
            ps, pd = m.parent(src) if src else None, m.parent(dst) if dst else None
            if ps is None and pd is None:
                return None
            if ps is None or pd is None:
                raise SystemExit(f"crashsim: rename across the tracked trees: {src} -> {dst}")
            (sd, sn), (dd, dn) = ps, pd
            if "RENAME_EXCHANGE" in flags:
                sd.entries[sn], dd.entries[dn] = dd.entries[dn], sd.entries[sn]
            else:
                ino = sd.entries.pop(sn)
                dd.entries[dn] = ino
            return "ns"
        if call in ("link", "linkat"):
            if call == "link":
                src, dst = self.path_of(a[0]), self.path_of(a[1])
            else:
                src, dst = self.path_of(a[1], a[0]), self.path_of(a[3], a[2])
            pd = m.parent(dst) if dst else None
            if pd is None:
                return None
            ino = m.lookup(src)
            if ino is None:
                raise SystemExit(f"crashsim: link from outside the tracked trees: {src}")
            pd[0].entries[pd[1]] = ino
            return "ns"
        if call in ("unlink", "unlinkat", "rmdir"):
            if call in ("unlink", "rmdir"):
                path = self.path_of(a[0])
            else:
                path = self.path_of(a[1], a[0])
            pd = m.parent(path) if path else None
            if pd is None:
                return None
            pd[0].entries.pop(pd[1], None)
            return "ns"
        if call in ("mkdir", "mkdirat"):
            if call == "mkdir":
                path, mode = self.path_of(a[0]), a[1]
            else:
                path, mode = self.path_of(a[1], a[0]), a[2]
            pd = m.parent(path) if path else None
            if pd is None:
                return None
            try:
                mode_i = int(mode, 8)
            except ValueError:
                mode_i = 0o755
            pd[0].entries[pd[1]] = m.new("dir", mode_i)
            return "ns"
        if call in ("symlink", "symlinkat"):
            if call == "symlink":
                target, path = unquote(a[0]), self.path_of(a[1])
            else:
                target, path = unquote(a[0]), self.path_of(a[2], a[1])
            pd = m.parent(path) if path else None
            if pd is None:
                return None
            ino = m.new("link")
            ino.target = target or b""
            pd[0].entries[pd[1]] = ino
            return "ns"
        if call in ("fstat", "newfstatat", "fstatat64", "statx", "stat", "lstat"):
            self.note_ino(call, a)
            return None
        if call in ("copy_file_range", "sendfile", "splice", "mknod", "mknodat"):
            for arg in a:
                fd, path = self.fd_path(arg)
                p = path or self.path_of(arg)
                if p and m.split(p) is not None:
                    raise SystemExit(f"crashsim: {call} on {p} is not modelled")
        return None


# ---------------------------------------------------------------------------------------------
# States


def write_state(ino, dest, synced, written):
    """Writes the tree of `ino` at `dest`: entries durable (synced) or current, bytes durable.
    `written` gets the path each inode was first written at (by `id`)."""
    os.mkdir(dest, 0o700)
    written.setdefault(id(ino), dest)
    entries = ino.durable_entries if synced else ino.entries
    for name, child in entries.items():
        p = os.path.join(dest, name)
        written.setdefault(id(child), p)
        if child.kind == "dir":
            write_state(child, p, synced, written)
        elif child.kind == "link":
            os.symlink(child.target, p)
        else:
            with open(p, "wb") as f:
                f.write(child.durable)
            os.chmod(p, child.mode)
    os.chmod(dest, ino.mode or 0o755)


RECORDED_INO = re.compile(rb'("ino"\s*:\s*)(\d+)')


def remap_inodes(model, written, store):
    """A reboot keeps inode numbers; a state written as copies does not. The identities a
    record in the store keeps (`"ino": N` in its JSON files, as a restore's RUNNING marker
    does) are rewritten from the real run's numbers (seen by the traced stat calls) to those
    of the copies; an inode not in this state gets 0, which names nothing."""
    new = {}
    for ino in model.all:
        if ino.real_ino is not None:
            p = written.get(id(ino))
            new[ino.real_ino] = os.lstat(p).st_ino if p else 0

    def sub(m):
        n = int(m.group(2))
        return m.group(1) + str(new.get(n, n)).encode()

    for d, _, files in os.walk(store):
        for f in files:
            if not f.endswith(".json"):
                continue
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                data = fh.read()
            out = RECORDED_INO.sub(sub, data)
            if out != data:
                with open(p, "wb") as fh:
                    fh.write(out)


def check_state(args, dirs, heads):
    """The checks on one state; a list of failures (empty when it holds)."""
    store = dirs[0]
    fails = []

    def run(argv, what):
        argv = [x.replace("{store}", store) for x in argv]
        for i, d in enumerate(dirs):
            argv = [x.replace("{%d}" % i, d) for x in argv]
        try:
            p = subprocess.run(argv, capture_output=True, timeout=60,
                               env=dict(os.environ, CKPTFS_FAULT=""))
        except subprocess.TimeoutExpired:
            fails.append({"check": what, "output": "hung (60 s)"})
            return False
        if p.returncode != 0:
            fails.append({"check": what, "rc": p.returncode,
                          "output": (p.stderr or p.stdout).decode(errors="replace")[-600:]})
            return False
        return True

    if not os.path.exists(os.path.join(store, "STORE.json")):
        return [{"check": "STORE.json", "output": "missing"}]
    if not run([args.ckptfs, "recover", "{store}"], "recover"):
        return fails
    run([args.ckptfs, "verify", "{store}"], "verify")
    # The store is usable after a reboot: its branches and history list.
    run([args.ckptfs, "branch", "list", "{store}"], "branch list")
    run([args.ckptfs, "log", "{store}"], "log")
    for branch, allowed in heads.items():
        ref = os.path.join(store, "refs", "branches", branch + ".json")
        try:
            with open(ref) as f:
                head = json.load(f).get("head")
        except FileNotFoundError:
            head = None
        except (OSError, ValueError) as e:
            fails.append({"check": f"branch {branch}", "output": f"unreadable: {e}"})
            continue
        if (head or "none") not in allowed:
            fails.append({"check": f"branch {branch}",
                          "output": f"head {head}, neither of {sorted(allowed)}"})
        elif head and not os.path.exists(os.path.join(store, "checkpoints", head)):
            fails.append({"check": f"branch {branch}", "output": f"record {head} missing"})
    for extra in args.check:
        run(json.loads(extra), "check " + extra)
    return fails


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ckptfs", required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--track", action="append", default=[])
    ap.add_argument("--work", required=True)
    ap.add_argument("--head", action="append", default=[])
    ap.add_argument("--check", action="append", default=[])
    ap.add_argument("--before-checks", action="append", default=[],
                    help="a JSON argv run once after the command, before any state is checked "
                         "(unmount a live workspace whose store the states copy)")
    ap.add_argument("--max-points", type=int, default=0)
    ap.add_argument("--keep", action="store_true", help="keep the first failing state")
    ap.add_argument("--remap-inodes", action="store_true",
                    help="trace stat results (strace -v) and rewrite the inode numbers the "
                         "store's JSON records keep to the copies' (see remap_inodes)")
    ap.add_argument("command", nargs="+")
    args = ap.parse_args()
    tracked = [os.path.realpath(args.store)] + [os.path.realpath(t) for t in args.track]
    heads = {}
    for h in args.head:
        b, _, ids = h.partition("=")
        heads[b] = set(ids.split(","))
    os.makedirs(args.work, exist_ok=True)
    # The trees before the command: the model starts from copies, as the command changes them.
    pre = os.path.join(args.work, "pre")
    shutil.rmtree(pre, ignore_errors=True)
    os.mkdir(pre)
    copies = {}
    for i, t in enumerate(tracked):
        copies[t] = os.path.join(pre, str(i))
        shutil.copytree(t, copies[t], symlinks=True)
    trace = os.path.join(args.work, "trace")
    # -b execve: a program the command starts (a view's daemon, mount helpers) is not
    # followed: daemons outlive the command, and strace would wait for them.
    verbose = ["-v"] if args.remap_inodes else []
    cmd = ["strace", "-f", "-b", "execve", "-y", "-qq", "-s", "0"] + verbose + ["-e", "write=all",
           "-e", "trace=%file,%desc,fsync,fdatasync,syncfs,sync,clone,clone3,fork,vfork",
           "-o", trace] + args.command
    p = subprocess.run(cmd, capture_output=True)
    if p.returncode != 0:
        print(json.dumps({"error": "the command failed", "rc": p.returncode,
                          "stderr": p.stderr.decode(errors="replace")[-2000:]}))
        return 0
    evs = events(trace)
    for argv in args.before_checks:
        subprocess.run(json.loads(argv), capture_output=True, check=False)
    # "@after" in --head: the head the store has once the command is done.
    for branch, allowed in heads.items():
        if "@after" in allowed:
            allowed.discard("@after")
            try:
                with open(os.path.join(tracked[0], "refs", "branches", branch + ".json")) as f:
                    allowed.add(json.load(f).get("head") or "none")
            except FileNotFoundError:
                allowed.add("none")

    def fresh():
        m = Model({t: load_tree(copies[t]) for t in tracked})
        return m, Replayer(m), [m.roots[t] for t in tracked]

    # First pass: the crash points are the steps that changed the trees' names or made
    # something durable (after a bare data write, both kinds of state equal the ones before
    # it: unsynced bytes are lost in both). --max-points spreads a subset over the run.
    _, rep, _ = fresh()
    steps = [i for i, ev in enumerate(evs) if rep.apply(ev) in ("ns", "sync")]
    chosen = set(steps)
    if args.max_points and len(steps) > args.max_points:
        stride = len(steps) / args.max_points
        chosen = {steps[int(i * stride)] for i in range(args.max_points)} | {steps[-1]}
    # Second pass: build and check the states at the chosen points.
    model, rep, roots = fresh()

    def snapshot(kind):
        """Writes the state of `kind` in place of the tracked trees (the command is done with
        them): paths recorded inside the store (a marker's, a root's) then name the state, as
        they would after a reboot. Returns the directories, the store first."""
        written = {}
        for t, r in zip(tracked, roots):
            shutil.rmtree(t, ignore_errors=True)
            write_state(r, t, kind == "synced", written)
        if args.remap_inodes:
            remap_inodes(model, written, tracked[0])
        return tracked

    failures, points, states = [], 0, 0
    for i, ev in enumerate(evs):
        rep.apply(ev)
        if i not in chosen:
            continue
        points += 1
        for kind in ("synced", "journaled"):
            dirs = snapshot(kind)
            states += 1
            fs = check_state(args, dirs, heads)
            if fs:
                failures.append({"step": i, "call": ev[1], "args": ev[2][:3], "state": kind,
                                 "failures": fs})
                if args.keep and not os.path.exists(os.path.join(args.work, "failed")):
                    for n, t in enumerate(tracked):
                        shutil.copytree(t, os.path.join(args.work, "failed", str(n)),
                                        symlinks=True)
    print(json.dumps({"steps": len(evs), "points": points, "states": states,
                      "failures": failures[:20], "failed_states": len(failures)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
