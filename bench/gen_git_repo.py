#!/usr/bin/env python3
"""A git repository shaped like a big real one, for benchmarks (bench/bench_git.sh).

    gen_git_repo.py DIR [--files N] [--commits C] [--seed S]

Writes a repository at DIR (which must not exist) with N files (default 100000) in a source
tree of nested directories (about 12 files per directory, depth 2 to 6, names from a word
list, a few big directories), file sizes drawn from a log-normal distribution around 2 KiB
(text lines, some files of 100 KiB or more), and a history of C commits (default 400): the
first adds most files, every later one edits 20-60 files (rewrites some lines), adds a few and
deletes one or two, as a real history does. The history goes through `git fast-import`, then
the work tree is checked out and the index refreshed, so `git status` starts clean. Deterministic
for one seed. About a minute for 100k files on a 2-core machine.
"""

import argparse
import os
import random
import subprocess
import sys

WORDS = (
    "alpha beta core util net io fs mem sched task proto codec cache index store view "
    "layer parse lex eval type check graph node edge tree walk scan map list queue pool "
    "buffer stream frame packet socket thread lock sync async event timer signal log "
    "trace metric config option flag arg cli api rpc http json xml yaml toml sql db "
    "table row column query plan exec vm jit gc heap stack arena slab page block chunk "
    "hash crypto key sign verify auth token session user group role policy rule test "
    "bench mock fixture helper common shared base model render ui widget layout style"
).split()
EXTS = [".rs", ".c", ".h", ".py", ".go", ".ts", ".md", ".txt", ".json", ".toml"]


def make_lines(rng, n):
    out = []
    for _ in range(n):
        indent = "    " * rng.randint(0, 3)
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 10)))
        out.append(f"{indent}{words};\n")
    return out


class Tree:
    """Directories and the files in them: paths only (contents come from the blob pool)."""

    def __init__(self, rng, files):
        self.rng = rng
        self.dirs = [""]
        self.paths = []
        self.next_id = 0
        self.grow(files)

    def new_dir(self):
        rng = self.rng
        parent = rng.choice(self.dirs)
        depth = parent.count("/") + (1 if parent else 0)
        if depth >= 6:
            parent = rng.choice(self.dirs[: max(1, len(self.dirs) // 10)])
        name = f"{rng.choice(WORDS)}_{len(self.dirs)}"
        d = f"{parent}/{name}" if parent else name
        self.dirs.append(d)
        return d

    def new_path(self):
        rng = self.rng
        if len(self.paths) > 12 * len(self.dirs) or len(self.dirs) < 20:
            d = self.new_dir()
        elif rng.random() < 0.05:
            d = rng.choice(self.dirs[:20])  # a few big directories
        else:
            d = rng.choice(self.dirs[1:])
        self.next_id += 1
        name = f"{rng.choice(WORDS)}_{self.next_id}{rng.choice(EXTS)}"
        return f"{d}/{name}" if d else name

    def grow(self, n):
        new = [self.new_path() for _ in range(n)]
        self.paths.extend(new)
        return new


def blob(rng, lines):
    size = min(int(rng.lognormvariate(7.6, 1.1)), 400_000)  # median ~2 KiB
    out = []
    total = 0
    start = rng.randrange(len(lines))
    while total < size:
        line = lines[(start + len(out) * 7919) % len(lines)]
        out.append(line)
        total += len(line)
    return "".join(out).encode()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--commits", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if os.path.exists(a.dir):
        sys.exit(f"gen_git_repo: {a.dir} already exists")
    rng = random.Random(a.seed)
    lines = make_lines(rng, 20_000)
    first = int(a.files * 0.85)
    tree = Tree(rng, first)
    subprocess.run(["git", "init", "-q", "-b", "main", a.dir], check=True)
    env = dict(os.environ, GIT_DIR=os.path.join(a.dir, ".git"))
    fi = subprocess.Popen(
        ["git", "fast-import", "--quiet", "--done"], stdin=subprocess.PIPE, env=env
    )
    w = fi.stdin
    later = (a.files - first) // max(1, a.commits - 1) + 1
    t = 1_600_000_000
    for c in range(a.commits):
        if c == 0:
            changes = [(p, blob(rng, lines)) for p in tree.paths]
            deletes = []
        else:
            edits = rng.sample(tree.paths, min(len(tree.paths), rng.randint(20, 60)))
            adds = tree.grow(later)
            changes = [(p, blob(rng, lines)) for p in edits + adds]
            deletes = [tree.paths.pop(rng.randrange(len(tree.paths)))]
            changed = set(p for p, _ in changes)
            deletes = [d for d in deletes if d not in changed]
        t += rng.randint(60, 20_000)
        msg = f"commit {c}: {rng.choice(WORDS)} {rng.choice(WORDS)}\n".encode()
        w.write(b"commit refs/heads/main\n")
        w.write(f"committer Bench <bench@example.com> {t} +0000\n".encode())
        w.write(b"data %d\n" % len(msg) + msg)
        for p in deletes:
            w.write(b"D " + p.encode() + b"\n")
        for p, data in changes:
            w.write(b"M 100644 inline " + p.encode() + b"\n")
            w.write(b"data %d\n" % len(data))
            w.write(data)
            w.write(b"\n")
        w.write(b"\n")
    w.write(b"done\n")
    w.close()
    if fi.wait() != 0:
        sys.exit("gen_git_repo: git fast-import failed")
    subprocess.run(["git", "-C", a.dir, "checkout", "-q", "-f", "main"], check=True)
    subprocess.run(["git", "-C", a.dir, "gc", "-q", "--auto"], check=False)
    subprocess.run(["git", "-C", a.dir, "status", "--short"], check=True, stdout=subprocess.DEVNULL)
    print(f"{a.dir}: {len(tree.paths)} files in {len(tree.dirs)} directories, {a.commits} commits")


if __name__ == "__main__":
    main()
