#!/usr/bin/env python3
"""Writes docs/schema/*.json (one JSON Schema per command's --json output) and the field
tables of docs/json.md, from the one description below, so the schema files and the document
say the same thing. tests/it/cli/json_schema.rs validates every command's real output against the
schema files, so the code cannot drift from either.

Run from the repository: python3 docs/schema/gen.py  (then commit what changed).
Every object is closed (additionalProperties: false) and lists every field it always has as
required: a field added to the code fails the test until it is described here.
"""

import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DOC = os.path.join(HERE, "..", "json.md")

# --- Building blocks -------------------------------------------------------------------

def t(schema, text):
    """A field: its schema and what it means."""
    return (schema, text)

ID = {"type": "string", "pattern": "^[0-9a-f]{64}$", "x-type": "id"}
HEX64 = {"type": "string", "pattern": "^[0-9a-f]{64}$", "x-type": "sha256 hex"}
TIME = {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$",
        "x-type": "RFC 3339 UTC"}
MODE = {"type": "string", "pattern": "^[0-7]{4}$", "x-type": "octal mode"}
U = {"type": "integer", "minimum": 0, "x-type": "count"}
BYTES = {"type": "integer", "minimum": 0, "x-type": "bytes"}
NS = {"type": "integer", "x-type": "Unix ns"}
STR = {"type": "string", "x-type": "string"}
PATH = {"type": "string", "x-type": "path"}
BOOL = {"type": "boolean", "x-type": "bool"}
NUM = {"type": "number", "x-type": "number"}
INT = {"type": "integer", "x-type": "integer"}
STATUS = {"type": "integer", "minimum": 0, "maximum": 255, "x-type": "exit status"}
TURN_ID = {"type": "string", "pattern": "^[0-9a-f]{12}$", "x-type": "turn id"}


def arr(items, name=None):
    return {"type": "array", "items": items, "x-type": f"[{name or typename(items)}]"}


def null(s):
    return {"anyOf": [s, {"type": "null"}], "x-type": f"{typename(s)} or null"}


def enum(*values):
    return {"enum": list(values), "x-type": " | ".join(f'"{v}"' for v in values)}


def const(v):
    return {"const": v, "x-type": f'"{v}"'}


def mapof(values, name=None, keys=None):
    s = {"type": "object", "additionalProperties": values,
         "x-type": f"{{NAME: {name or typename(values)}}}"}
    if keys is not None:
        s["propertyNames"] = keys
    return s


def obj(name, fields, optional=(), text=""):
    """A closed object; `optional` names fields that may be absent."""
    return {"type": "object", "x-name": name, "x-text": text,
            "properties": fields, "x-optional": list(optional)}


def typename(s):
    if "x-name" in s:
        return s["x-name"]
    return s.get("x-type", "value")


# --- Shared shapes --------------------------------------------------------------------

STATS = obj("Stats", {
    "files": t(U, "files in the checkpoint"),
    "dirs": t(U, "directories, the roots included"),
    "symlinks": t(U, "symbolic links"),
    "bytes": t(BYTES, "sum of file sizes"),
    "new_objects": t(U, "objects this capture added to the store"),
    "new_bytes": t(BYTES, "bytes of those objects on disk"),
    "files_read": t(U, "files read (the others were unchanged since the parent)"),
}, text="What a capture or checkpoint recorded.")

ROOT_RECORD = obj("RootRecord", {
    "tree": t(ID, "the root directory's tree object"),
    "mode": t(MODE, "the root directory's permission bits"),
    "uid": t(U, "owner"),
    "gid": t(U, "group"),
    "mtime_ns": t(NS, "modification time"),
    "subdirs": t(U, "subdirectories directly in the root"),
    "files": t(U, "files below the root"),
    "bytes": t(BYTES, "sum of their sizes"),
    "xattrs": t(arr(arr(STR, "hex"), "[hex name, hex value]"),
                "the root's extended attributes as [hex name, hex value] pairs (absent when none)"),
}, optional=["xattrs"], text="One root of a checkpoint record.")

META = {"type": "object",
        "propertyNames": {"pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"},
        "additionalProperties": {"type": ["string", "number", "boolean", "null"]},
        "maxProperties": 256,
        "x-type": "{KEY: string, number, bool or null}"}

PLATFORM_KEYS = enum("os", "kernel", "arch", "libc")
RUNTIME = obj("Runtime", {
    "platform": t(mapof(STR, "string", keys=PLATFORM_KEYS),
                  "`os` (uname sysname), `kernel` (release), `arch` (machine), `libc` (`glibc 2.36`)"),
    "files": t(mapof(STR, "string"),
               "each declared file (as declared) -> `sha256:<hex> <resolved path>`, or `missing` (absent when none is declared)"),
    "commands": t(mapof(STR, "string"),
                  "each declared command line -> its output (one line of at most 200 bytes, else `sha256:<hex>`; `exit N: ` first when it did not exit 0) (absent when none is declared)"),
    "command_output": t(enum("stdout"), "which output of the declared commands `commands` holds: `stdout` (absent in records made before: stdout and stderr together; absent when no command is declared)"),
}, optional=["files", "commands", "command_output"],
    text="A runtime fingerprint: what an agent's resume depends on (docs/runner.md, \"Runtime fingerprints\"). Its fields, as differences name them, are `platform.KEY`, `file:PATH` and `command:CMDLINE`.")

TURN_RECORD = obj("TurnRecord", {
    "id": t(TURN_ID, "the turn, as `log --turns` and the audit log name it"),
    "command": t(arr(STR), "COMMAND and its arguments (lossy UTF-8)"),
    "exit_status": t(STATUS, "COMMAND's exit status (0: only completed turns are recorded)"),
    "started_ns": t(NS, "when COMMAND started"),
    "ended_ns": t(NS, "when it exited"),
    "accepted_runtime_change": t({"const": True, "x-type": "true"}, "the turn ran with `--accept-runtime-change` over a differing fingerprint (absent otherwise)"),
}, optional=["accepted_runtime_change"], text="The turn (`ckptfs turn`) that took a checkpoint.")

ANNOTATIONS = {
    "meta": t(META, "`--meta KEY=VALUE` (strings) and `--meta-file` keys (strings, numbers, booleans, null); absent when none. Keys: 1-128 bytes of letters, digits, `_`, `.`, `-`, starting with a letter or digit; at most 256 keys, 64 KiB"),
    "runtime": t(RUNTIME, "the fingerprint a turn ran under (absent when not taken by a turn)"),
    "turn": t(TURN_RECORD, "the turn that took it (absent when not taken by a turn)"),
}

RECORD = obj("Checkpoint", {
    "version": t(U, "record format version"),
    "roots": t(mapof(ROOT_RECORD), "each root by name"),
    "parents": t(arr(ID), "parent checkpoints (first = the one it was taken after)"),
    "branch": t(STR, "the branch it was taken on"),
    "label": t(null(STR), "the label it was created with (`--label`); `labels` beside the record lists every label naming it now"),
    "message": t(STR, "the message"),
    "time_ns": t(NS, "when it was taken"),
    "time_rfc3339": t(TIME, "`time_ns` as RFC 3339 (added by the CLI, not in the record)"),
    "stats": t(STATS, "what the capture recorded"),
    **ANNOTATIONS,
}, optional=list(ANNOTATIONS),
    text="A checkpoint record as `show`, `capture` and `checkpoint` print it. Modes are octal strings; the record on disk keeps its own encoding (its hash is the id). `meta`, `runtime` and `turn` are absent when empty, so a record without them has the bytes (and id) it had before they existed.")

LABELS = t(arr(STR), "every label naming the checkpoint now")

CHANGE_KINDS = ("added", "removed", "modified", "renamed", "type", "mode", "mtime", "xattr")
CHANGE = obj("Change", {
    "change": t(enum(*CHANGE_KINDS), "what changed (`mode` covers mode and owner)"),
    "path": t(STR, "`ROOT/PATH` (for a rename, the new path)"),
    "from": t(STR, "for `renamed`: the old `ROOT/PATH`"),
    "size": t(BYTES, "size now (before, for `removed`): bytes of a file or a link target, entries of a directory"),
    "size_before": t(BYTES, "size before, when there was an entry before"),
}, optional=["from", "size", "size_before"],
    text="One difference between two sides. `diff --json` gives `size`/`size_before` only with `--stat`; `status` always.")

RESTORE = obj("RestoreReport", {
    "checkpoint": t(ID, "the checkpoint restored from"),
    "root": t(STR, "its root"),
    "path": t(STR, "the path restored below the root (empty: the root)"),
    "type": t(enum("dir", "file", "symlink"), "what was restored, named as `ls` and `find` name entry types"),
    "kind": t(enum("directory", "file", "symlink"), "the same as `type` (`directory` for `dir`), kept for older scripts: read `type`"),
    "dir": t(PATH, "where it was written"),
    "files": t(U, "files written"),
    "bytes": t(BYTES, "their bytes"),
    "moved_aside": t(null(PATH), "where what was there was moved (beside it, or under STORE/displaced/)"),
}, text="One restored target.")

REASONS = ("branch_head", "label", "pinned", "workspace_base", "policy", "last", "within",
           "hourly", "daily", "weekly", "monthly", "yearly", "branch", "no_policy",
           "pin_keeps_all")
REASON = enum(*REASONS)
GARBAGE = ("cache (--clear-cache)", "stat cache of a pruned or missing checkpoint",
           "temp file of a finished process", "pin of a process that exited",
           "control socket of a daemon that is gone", "pid file of a process that exited",
           "upper layer of a deleted branch", "reflink snapshot no checkpoint uses",
           "displaced (--prune-displaced)")

POLICY = obj("RetentionPolicy", {
    "keep_last": t(U, "--keep-last"),
    "keep_within": t(STR, "--keep-within, as given"),
    "keep_hourly": t(U, "--keep-hourly"),
    "keep_daily": t(U, "--keep-daily"),
    "keep_weekly": t(U, "--keep-weekly"),
    "keep_monthly": t(U, "--keep-monthly"),
    "keep_yearly": t(U, "--keep-yearly"),
    "keep_branch": t(arr(STR), "--keep-branch"),
}, optional=["keep_last", "keep_within", "keep_hourly", "keep_daily", "keep_weekly",
             "keep_monthly", "keep_yearly", "keep_branch"],
    text="The rules in force; a rule not given is absent.")

GC = obj("GcReport", {
    "policy": t(POLICY, "the retention policy applied"),
    "policy_source": t(enum("command line", "STORE.json", "none (every checkpoint is kept)"), "where the policy came from"),
    "checkpoints": t(U, "checkpoint records before gc"),
    "kept": t(mapof(U, "count", keys=REASON), "kept checkpoints counted by their first reason (every rule counts as `policy`)"),
    "pruned": t(arr(obj("PrunedCheckpoint", {
        "id": t(ID, "the checkpoint"),
        "branch": t(STR, "its branch"),
        "time": t(TIME, "when it was taken"),
    })), "checkpoints whose records go, by branch and time"),
    "decisions": t(arr(obj("CheckpointDecision", {
        "id": t(ID, "the checkpoint"),
        "branch": t(STR, "its branch"),
        "time": t(TIME, "when it was taken"),
        "label": t(null(STR), "the label its record was made with"),
        "labels": LABELS,
        "message": t(STR, "the message's first line"),
        "kept": t(arr(REASON, "reason"), "every reason that keeps it (empty when pruned)"),
        "pruned": t(BOOL, "whether its record goes"),
    })), "every checkpoint and why it stays or goes, by branch, newest first"),
    "objects": t(U, "object files before gc"),
    "objects_removed": t(U, "object files nothing kept reaches (removed)"),
    "object_bytes_freed": t(BYTES, "their bytes"),
    "paths_removed": t(arr(obj("PrunedPath", {
        "path": t(STR, "relative to the store"),
        "what": t(enum(*GARBAGE), "why it is garbage"),
        "bytes": t(BYTES, "its size"),
    })), "ephemeral and cache paths removed"),
    "kept_for_review": t(arr(STR), "paths left for a person (displaced/ without --prune-displaced)"),
    "pins": t(arr(STR), "live pins honoured, as OWNER-PID"),
    "bytes_freed": t(BYTES, "everything freed"),
}, text="What gc does (`--dry-run`) or did: the same shape for both.")

CKREF = obj("CheckpointRef", {
    "id": t(ID, "the checkpoint"),
    "branch": t(STR, "the branch it was taken on"),
    "time_ns": t(NS, "when"),
    "time_rfc3339": t(TIME, "when"),
    "labels": LABELS,
})

ENTRY = obj("EntryInfo", {
    "type": t(enum("file", "dir", "symlink"), "entry type"),
    "size": t(BYTES, "a file's size, a directory's entry count, a link target's length"),
    "mode": t(MODE, "permission bits"),
    "uid": t(U, "owner"),
    "gid": t(U, "group"),
    "mtime_ns": t(NS, "modification time"),
})

WORKSPACE_STATE = obj("WorkspaceState", {
    "branch": t(STR, "the branch mounted"),
    "base": t(ID, "the checkpoint it was mounted at (the lower layer)"),
    "roots": t(mapof(obj("MountedRoot", {
        "mountpoint": t(PATH, "where the root is mounted"),
        "lower": t(PATH, "the read-only view of the base"),
        "upper": t(PATH, "where writes land (STORE/upper/BRANCH/.top-ROOT/ROOT, made at the first change)"),
        "work": t(PATH, "overlayfs's work directory"),
    })), "each root by name"),
    "mounted_ns": t(NS, "when it was mounted"),
    "freeze_cgroups": t(arr(PATH), "cgroups each checkpoint freezes (absent when none)"),
    "freeze_fs": t(BOOL, "each checkpoint freezes the store's filesystem (absent when not)"),
    "fold_budget": t(BYTES, "the upper layer is folded only once it holds more than this, and that fold keeps the files written last up to half of it (`mount --fold-budget`; absent: at every checkpoint with nobody inside, keeping nothing)"),
}, optional=["freeze_cgroups", "freeze_fs", "fold_budget"])

# --- Commands -------------------------------------------------------------------------

COMMANDS = []


def command(name, title, schema, text, example):
    COMMANDS.append((name, title, schema, text, example))


command("capture", "capture", obj("CaptureReport", {
    "id": t(ID, "the new checkpoint"),
    "checkpoint": t(RECORD, "its record"),
    "labels": LABELS,
}), "The checkpoint recorded.", "ckptfs capture STORE --json")

HOLDER = obj("Holder", {
    "pid": t(U, "process id"),
    "command": t(STR, "its command name (/proc/PID/comm)"),
    "how": t(enum("cwd", "root", "open file", "open for writing", "mapping"), "what of it is inside"),
    "path": t(PATH, "the path inside, as the workspace shows it"),
})
FOLD = obj("FoldReport", {
    "folded": t(BOOL, "the upper layer was folded into the base: the base is the head, and the upper holds only the kept files"),
    "upper_files": t(U, "files of the upper layer folded (`folded`, kept ones included) or waiting to be"),
    "upper_bytes": t(BYTES, "their bytes"),
    "kept_files": t(U, "files a fold past its budget kept in the fresh upper layer (the hot set: written last, up to half the budget; their bytes are in the store too); 0 otherwise, and always 0 in `status`"),
    "kept_bytes": t(BYTES, "their bytes"),
    "holders": t(arr(HOLDER), "who is inside, when the fold waits for them"),
    "reason": t(STR, "why nothing was folded, when it was not for `holders` (`--no-fold` when the checkpoint asked not to; in `status`, an upper layer the fold budget keeps, or the files the last fold kept: their bytes are then in the store too)"),
}, optional=["reason"], text="A fold of a workspace's upper layer into its base (docs/workspaces.md).")

command("checkpoint", "checkpoint", obj("WorkspaceCheckpoint", {
    "id": t(ID, "the new checkpoint, or the head that already records the workspace"),
    "recorded": t(BOOL, "a checkpoint was recorded (false: nothing new, none recorded without --allow-empty)"),
    "checkpoint": t(RECORD, "its record"),
    "labels": LABELS,
    "fold": t(FOLD, "the fold that followed it"),
    "files_read": t(U, "files read (changed since the last checkpoint)"),
    "bytes_read": t(BYTES, "their bytes"),
    "bytes_unread": t(BYTES, "bytes reflink snapshots showed unchanged, so not read"),
    "dirs_merged": t(U, "upper directories merged (the others kept their tree ids unread)"),
    "elapsed_ms": t(U, "time taken"),
    "held": t(obj("Held", {
        "micros": t(U, "from the freeze request to the thaw"),
        "files_read": t(U, "files read while frozen"),
        "bytes_read": t(BYTES, "their bytes"),
        "dirs_merged": t(U, "directories merged while frozen"),
    }), "with --freeze-cgroup or --freeze-fs: how long writers were held"),
    "merge": t(obj("MergeProgress", {
        "source": t(STR, "what is merged in, as given to `merge`"),
        "theirs": t(ID, "the checkpoint merged in"),
        "recorded": t(BOOL, "this checkpoint records the merge: its second parent is `theirs`, and the merge is over"),
        "unresolved": t(arr(STR), "`ROOT/PATH`s of conflicts still open: the merge stays in progress and this checkpoint (if recorded) has one parent"),
        "interrupted": t(BOOL, "the merge was cut short while being written into the workspace: never recorded as a merge (`merge --abort` puts the workspace back)"),
    }), "a merge in progress in the workspace (`ckptfs merge` into it): whether this checkpoint recorded it"),
}, optional=["held", "merge"]), "The checkpoint of a mounted workspace.",
    "ckptfs checkpoint /workspace/room --json")

command("restore", "restore", {"oneOf": [RESTORE, obj("RestoreAll", {
    "restored": t(arr(RESTORE), "every target, in order"),
})], "x-type": "RestoreReport or {restored: [RestoreReport]}"},
    "With `--to`, `--root` or a `:ROOT` in the spec, one report; `--in-place` of every root (no root named) gives `{\"restored\": [...]}`, one report per root.",
    "ckptfs restore STORE C --to DIR --json")

command("recover", "recover", obj("RecoverReport", {
    "interrupted": t(null(STR), "the interrupted operation (`OP (pid N)`), if any"),
    "actions": t(arr(STR), "what was done, one sentence each"),
    "temp_files_removed": t(U, "half-written temp files removed"),
}), "What recover repaired.", "ckptfs recover STORE --json")

LOG_ROW = obj("LogRow", {
    "id": t(ID, "the checkpoint"),
    "branch": t(STR, "the branch it was taken on"),
    "time": t(TIME, "when it was taken"),
    "time_rfc3339": t(TIME, "the same (kept for scripts that read it)"),
    "time_ns": t(NS, "the same in Unix ns"),
    "parents": t(arr(ID), "parents: the graph's edges"),
    "labels": LABELS,
    "message": t(STR, "the message"),
    "stats": t(STATS, "what it recorded"),
    **ANNOTATIONS,
    "graph": t(obj("GraphRow", {
        "joins": t(arr(STR), "lines drawn just above it: lanes moving aside for an octopus merge (three or more parents), as git draws them"),
        "lanes": t(STR, "the start of its own line: `*` in its column and the other lanes, padded to the graph's width"),
        "column": t(U, "its column, 0 = leftmost"),
        "below": t(arr(STR), "lines drawn just below it: a merge's parents fanning out (`|\\`), lanes joining one to their left (`|/`), as `git log --graph` draws them"),
    }), "with --graph: how the graph draws it"),
}, optional=list(ANNOTATIONS) + ["graph"])
command("log", "log", arr(LOG_ROW), "Checkpoints newest first (or one branch's line); with `--graph`, each row also has `graph`; `meta`, `runtime` and `turn` as in the record, when it has them. `log --turns` prints another shape (below).",
        "ckptfs log STORE --json; ckptfs log STORE --graph --json")

TURN_OUTCOMES = ("ok", "failed", "killed", "cannot-run", "checkpoint-failed")
TURN_ROW_FIELDS = {
    "turn": t(TURN_ID, "the turn"),
    "branch": t(STR, "its branch"),
    "started": t(TIME, "when it started (its `turn-start` audit line)"),
    "command": t(arr(STR), "COMMAND and its arguments"),
    "outcome": t(enum(*TURN_OUTCOMES, "crashed", "running", "interrupted"),
                 "the outcome recorded (`crashed`: its runner died, recorded by `recover`); with no outcome line, `running` (the marker's process is alive) or `interrupted` (it is not: run `recover`)"),
    "exit_status": t(null(INT), "its exit status (`turn`'s: 128+N for a signal N), null while none is recorded"),
    "checkpoint": t(null(ID), "the checkpoint it recorded (only when `ok`)"),
    "ended": t(null(TIME), "when its outcome was recorded (null with none)"),
    "label": t(null(STR), "its `--label`"),
}
command("log-turns", "log --turns", arr(obj("TurnRow", TURN_ROW_FIELDS)), "Turns (`ckptfs turn`) from the store's audit log, newest first (`--branch B`, `-n N` select as for checkpoints).",
    "ckptfs log STORE --turns --json")

command("show", "show", obj("ShowReport", {
    "id": t(ID, "the checkpoint"),
    "checkpoint": t(RECORD, "its record"),
    "labels": LABELS,
}), "One checkpoint.", "ckptfs show STORE C --json")

command("ls", "ls", arr(obj("LsRow", {
    "path": t(STR, "relative to the directory listed"),
    "type": t(enum("file", "dir", "symlink"), "entry type"),
    "mode": t(MODE, "permission bits"),
    "uid": t(U, "owner"),
    "gid": t(U, "group"),
    "size": t(BYTES, "a file's size, a directory's entry count, a link target's length"),
    "mtime_ns": t(NS, "modification time"),
    "target": t(null(STR), "a symlink's target"),
})), "The entries of a directory of a checkpoint (`-r`: all below it).", "ckptfs ls STORE C:ws/src -r --json")

command("diff", "diff", arr(CHANGE), "One row per changed path. `-p` adds nothing to the JSON (the patch is text only).",
        "ckptfs diff STORE A B --stat --json")

command("stats", "stats", obj("StatsReport", {
    "store": t(obj("StoreFigures", {
        "objects": t(U, "object files under objects/ (reachable or not)"),
        "stored_bytes": t(BYTES, "their bytes on disk"),
        "checkpoints": t(U, "checkpoint records"),
        "branches": t(U, "branches, any state"),
        "compressed": t(BOOL, "objects are zstd-compressed on disk"),
        "upper_files": t(U, "files in the workspaces' upper layers (under upper/), beside the store"),
        "upper_bytes": t(BYTES, "their bytes; what a checkpoint recorded and the fold kept (a fold budget, a process inside) is in the store too"),
    }), "the whole store"),
    "selected": t(obj("SelectionFigures", {
        "checkpoints": t(U, "checkpoints selected"),
        "files": t(U, "their files, each as often as it occurs"),
        "logical_bytes": t(BYTES, "sum of file sizes over them (what restoring them all writes)"),
        "trees": t(U, "distinct trees they reach"),
        "chunks": t(U, "distinct chunks they reach"),
        "content_bytes": t(BYTES, "uncompressed bytes of those chunks (after deduplication)"),
        "stored_bytes": t(BYTES, "on-disk bytes of the distinct objects they reach"),
        "dedup_ratio": t(NUM, "logical_bytes / content_bytes (1 with no content)"),
        "unique_bytes": t(BYTES, "content bytes no checkpoint outside the selection reaches"),
        "unique_stored_bytes": t(BYTES, "on-disk bytes of objects no checkpoint outside the selection reaches"),
    }), "the selected checkpoints together"),
    "branches": t(arr(obj("BranchFigures", {
        "name": t(STR, "the branch (checkpoints grouped by the branch they were taken on)"),
        "checkpoints": t(U, "its selected checkpoints"),
        "logical_bytes": t(BYTES, "their logical bytes"),
        "unique_bytes": t(BYTES, "content bytes no checkpoint of another branch reaches"),
        "unique_stored_bytes": t(BYTES, "the same on disk, trees included"),
    })), "per branch, by name"),
    "checkpoints": t(arr(obj("CheckpointFigures", {
        "id": t(ID, "the checkpoint"),
        "branch": t(STR, "the branch it was taken on"),
        "time_ns": t(NS, "when"),
        "time_rfc3339": t(TIME, "when"),
        "labels": LABELS,
        "files": t(U, "its files"),
        "logical_bytes": t(BYTES, "sum of its file sizes (ZFS's refer, uncompressed)"),
        "unique_bytes": t(BYTES, "content bytes no other checkpoint reaches: what forgetting it and gc would free, uncompressed"),
        "unique_stored_bytes": t(BYTES, "the same on disk, trees included (ZFS's used)"),
    })), "per checkpoint, oldest first"),
}), "Store statistics (see `ckptfs stats --help` for the figures); `stats STORE C` or `--branch B` select checkpoints, unique bytes are always against the whole store.",
    "ckptfs stats STORE --json")

command("find", "find PATTERN", obj("FindReport", {
    "patterns": t(arr(STR), "the patterns given"),
    "checkpoints_searched": t(U, "checkpoints searched"),
    "trees_read": t(U, "distinct trees decoded (an unchanged subtree is read once)"),
    "paths": t(arr(obj("FoundPath", {
        "path": t(STR, "`ROOT/PATH`"),
        "found_in": t(arr(obj("FoundIn", {
            "checkpoint": t(CKREF, "a checkpoint holding it"),
            "entry": t(ENTRY, "the entry there"),
        })), "every checkpoint holding it, oldest first"),
    })), "matched paths, sorted"),
}), "Paths matching the patterns, with the checkpoints holding them.", "ckptfs find STORE '*.db' --json")

command("find-history", "find --history", obj("HistoryReport", {
    "path": t(STR, "`ROOT/PATH`"),
    "checkpoints_searched": t(U, "checkpoints searched"),
    "changes": t(arr(obj("PathChange", {
        "checkpoint": t(CKREF, "where it changed"),
        "parent": t(null(ID), "the parent compared with (null for a first checkpoint)"),
        "change": t(enum("added", "removed", "type", "modified", "metadata"), "how it changed"),
        "entry": t(null(ENTRY), "the entry in this checkpoint (null when removed)"),
    })), "every change, oldest first"),
}), "The checkpoints in which one path changed against their first parent.",
    "ckptfs find STORE --history ws/notes.md --json")

command("label-delete", "label delete", obj("LabelDeletion", {
    "label": t(STR, "the label deleted"),
    "checkpoint": t(null(ID), "what it named (null when its file did not read)"),
}), "The label deleted.", "ckptfs label delete STORE NAME --json")

command("forget", "forget", obj("ForgetReport", {
    "checkpoints": t(arr(obj("ForgottenCheckpoint", {
        "id": t(ID, "the checkpoint"),
        "branch": t(STR, "its branch"),
        "time": t(TIME, "when it was taken"),
        "parents": t(arr(ID), "its parents (the tombstone keeps them)"),
        "message": t(STR, "its message"),
        "recorded_label": t(STR, "the label its record carries, when that label no longer exists"),
    }, optional=["recorded_label"])), "the checkpoints that go"),
    "already_forgotten": t(arr(ID), "named but forgotten before"),
    "objects_only_theirs": t(U, "objects only they reach (swept by --prune or the next gc)"),
    "objects_shared": t(U, "objects they share with checkpoints that stay (kept)"),
    "stat_caches": t(arr(STR), "stat caches removed (store-relative)"),
    "gc": t(GC, "with --prune: the gc that followed"),
}, optional=["gc"]), "What forget does (`--dry-run`) or did.", "ckptfs forget STORE C --dry-run --json")

command("branch-list", "branch list", arr(obj("BranchRow", {
    "name": t(STR, "the branch"),
    "state": t(enum("active", "archived"), "its state"),
    "head": t(null(ID), "its head checkpoint"),
    "forked_from": t(null(ID), "the checkpoint it was forked from"),
    "last_activity": t(TIME, "its head's time or its last change, the later"),
    "mounted": t(BOOL, "mounted as a workspace"),
    "parked": t(BOOL, "parked: its overlays kept mounted read-only by a switch away, for a switch back (its upper layer's bytes wait meanwhile)"),
    "dirty": t(BOOL, "its upper layer holds changes not checkpointed"),
    "dirty_files": t(U, "files changed"),
    "dirty_bytes": t(BYTES, "their bytes"),
    "upper_bytes": t(BYTES, "bytes in its upper layer"),
    "lineage": t(obj("BranchLineage", {
        "parent": t(null(STR), "the branch it was forked from: the one whose line of first parents holds `forked_from` (the branch the fork point was recorded on, when that one still holds it); null when not forked or no branch holds it"),
        "depth": t(U, "its depth in the tree, 0 for a root (a branch whose parent is null or not listed)"),
        "merged_into": t(arr(obj("MergedInto", {
            "branch": t(STR, "the branch merged into"),
            "checkpoint": t(ID, "the merge: a checkpoint on that branch's line whose second (or later) parent is on this branch's line"),
            "time": t(TIME, "when it was recorded"),
        })), "merges that brought its work into other branches, oldest first"),
    }), "with --tree: where it comes from and where it went"),
}, optional=["lineage"])), "Branches (archived ones with --all); with `--tree`, in tree order (each branch after the one it was forked from), each with `lineage`.", "ckptfs branch list STORE --json; ckptfs branch list STORE --tree --json")

command("fork", "fork", obj("ForkReport", {
    "checkpoint": t(ID, "the checkpoint forked (every new branch's head)"),
    "branches": t(arr(STR), "the branches made: NAME, or NAME-1 .. NAME-N with --count N"),
}), "The branches a fork made (all of them, or none and an error).", "ckptfs fork STORE main try --count 3 --json")

command("switch", "switch", obj("SwitchReport", {
    "from_branch": t(STR, "the branch shown before"),
    "to_branch": t(STR, "the branch shown now"),
    "checkpoint": t(ID, "its checkpoint"),
    "created_branch": t(BOOL, "a new branch was started (switch to a non-head checkpoint)"),
    "checkpointed": t(null(ID), "with --checkpoint-first: the checkpoint taken first"),
    "displaced": t(null(PATH), "with --discard: where the changes were set aside"),
    "left_behind": t(arr(HOLDER), "processes still inside the tree left behind, at the path the workspace showed"),
    "left_behind_writable": t(BOOL, "always false: a switch makes the tree it leaves read-only in every mount namespace, or refuses (older builds: a file open for writing kept it writable)"),
    "folded_left": t(BOOL, "the upper layer of the branch left was all in its head and went (a fold)"),
    "parked_left": t(BOOL, "the tree of the branch left stays mounted read-only, parked, for a switch back to move it back with its cached inodes (its upper layer waits meanwhile)"),
    "resumed": t(BOOL, "the target's parked tree was moved back (nothing mounted afresh)"),
    "elapsed_ms": t(U, "time taken"),
}), "What switch did.", "ckptfs switch ROOM --to B --json")

ROW_CONFLICT = obj("RowConflict", {
    "table": t(STR, "the SQLite table (`*` for the whole database)"),
    "key": t(null(STR), "the row's primary key as `col=value[,col=value]` (SQL literals), or null for a table-level conflict"),
    "why": t(STR, "`both` (the row changed both ways), `deleted-changed`, `constraint`, `schema`, `no-primary-key`, `too-large`"),
})
MERGE = obj("MergeReport", {
    "into": t(STR, "the branch merged into (ours)"),
    "source": t(STR, "what was merged in, as given (theirs)"),
    "ours": t(ID, "the head of `into` before the merge"),
    "theirs": t(ID, "the checkpoint `source` names"),
    "base": t(null(ID), "the nearest common ancestor (null: unrelated histories, merged as if both added everything)"),
    "other_bases": t(arr(ID), "other nearest common ancestors of a criss-cross history (the newest was used)"),
    "outcome": t(enum("up-to-date", "fast-forward", "merged", "conflicts"), "what happened (or, with --dry-run, would happen)"),
    "dry_run": t(BOOL, "nothing was written"),
    "checkpoint": t(null(ID), "the merge checkpoint recorded, or theirs for a fast-forward; null in a dry run, when up to date, or with conflicts"),
    "steps": t(arr(obj("MergeStep", {
        "path": t(STR, "`ROOT/PATH`"),
        "how": t(enum("added", "removed", "modified", "renamed", "merged"), "theirs' change taken, or `merged`: both sides' changes combined"),
        "driver": t(enum("text", "append", "sqlite", "binary"), "for `merged`: the driver that combined them"),
        "from": t(STR, "for `renamed`: the old `ROOT/PATH`"),
    }, optional=("driver", "from"))), "every path the merge changes in ours (a directory taken whole is one step)"),
    "conflicts": t(arr(obj("MergeConflict", {
        "path": t(STR, "`ROOT/PATH`"),
        "kind": t(enum("content", "add-add", "modify-delete", "type", "symlink", "rename", "mode", "owner", "xattr", "root"), "what conflicts"),
        "detail": t(STR, "what each side did"),
        "rows": t(arr(ROW_CONFLICT), "SQLite rows or tables in conflict"),
        "resolved": t(null(enum("ours", "theirs")), "the side --take kept, or null: open (nothing is recorded while one is open)"),
    }, optional=("rows",))), "paths both sides changed in ways that do not combine (exit 1 while any is open)"),
    "workspace": t(obj("WorkspaceMerge", {
        "mountpoints": t(mapof(PATH, "path"), "each root's mountpoint"),
        "written": t(U, "entries written into the workspace (a new directory counts once)"),
        "removed": t(U, "entries removed from it"),
        "in_progress": t(BOOL, "a merge is in progress in the workspace: its conflicts are left there (text with git's markers) until resolved, then `ckptfs checkpoint` records it; `merge --abort` gives up"),
    }), "merged into a mounted workspace: what was written there"),
}, optional=("other_bases", "workspace"))
MERGE_ABORT = obj("MergeAbort", {
    "into": t(STR, "the branch whose workspace was put back"),
    "source": t(STR, "what the merge given up was merging in"),
    "theirs": t(ID, "its checkpoint"),
    "restored": t(ID, "the checkpoint the workspace holds again (the branch head when the merge started)"),
    "written": t(U, "entries written into the workspace"),
    "removed": t(U, "entries removed from it"),
})
command("merge", "merge", {"oneOf": [MERGE, MERGE_ABORT]},
        "What merge did or would do (MergeReport), or what `merge --abort` undid (MergeAbort).",
        "ckptfs merge STORE SOURCE --into BRANCH --json")

VERIFY = obj("VerifyReport", {
    "checkpoints": t(U, "checkpoints verified"),
    "trees": t(U, "trees decoded"),
    "objects": t(U, "objects re-hashed (trees and chunks)"),
    "bytes": t(BYTES, "bytes re-hashed"),
    "findings": t(arr(obj("VerifyFinding", {
        "object": t(STR, "the object or record at fault (a store-relative path for `unexpected`)"),
        "problem": t(enum("missing", "corrupt", "unreadable", "unexpected"), "what is wrong"),
        "detail": t(STR, "the error"),
        "used_by": t(arr(STR), "`CHECKPOINT:ROOT/PATH` of entries that use it (at most 20)"),
        "used_by_count": t(U, "how many use it"),
    })), "every problem found (exit 1 when any)"),
})
REMOTE_VERIFY = obj("RemoteVerifyReport", {
    "remote": t(STR, "the remote verified"),
    "checkpoints": t(U, "checkpoints its refs reach, read from its records"),
    "objects": t(U, "objects fetched, opened and re-hashed"),
    "bytes": t(BYTES, "their bytes (plaintext)"),
    "findings": t(arr(obj("RemoteFinding", {
        "object": t(STR, "the object (hex id), or `record ID`, `tree ID`, or the ref at fault"),
        "problem": t(STR, "what is wrong (the error, or `missing on the remote`)"),
        "paths": t(arr(STR), "`CHECKPOINT:ROOT/PATH` of entries that use it (at most 10)"),
    })), "every problem found (exit 1 when any)"),
}, text="What `verify --remote NAME` checked on the remote and found.")

command("verify", "verify", {"oneOf": [VERIFY, REMOTE_VERIFY], "x-type": "VerifyReport or RemoteVerifyReport"},
        "What verify checked and found: a VerifyReport of the store, or with `--remote NAME` a RemoteVerifyReport of the remote.",
        "ckptfs verify STORE --json")

REMOTE_GC = obj("RemoteGcPlan", {
    "remote": t(STR, "the remote"),
    "records": t(arr(STR, "key"), "object keys of the checkpoint records no remote ref reaches, forgotten ones among them (removed, or to be)"),
    "forgotten": t(arr(ID), "checkpoints forgotten on the remote (tombstones, which its history steps over) whose records this gc removes"),
    "forgets_published": t(U, "of those, forgotten in this store and published to the remote by this gc"),
    "packs": t(arr(STR, "key"), "object keys of the packs that hold no reached object (removed whole, or to be)"),
    "pack_bytes": t(BYTES, "those packs' bytes"),
    "repacked": t(arr(obj("RepackedPack", {
        "pack": t(STR, "the pack's object key"),
        "reason": t(enum("unused", "small"), "`unused`: repacked to bring unused bytes within max_unused; `small`: merged by --repack-small"),
        "bytes": t(BYTES, "its size"),
        "live_bytes": t(BYTES, "bytes of the reached objects in it, copied into new packs"),
        "live_objects": t(U, "reached objects in it"),
    }, text="A pack gc --remote rewrites: its live objects go into new packs, then it is removed.")),
        "packs repacked (most unused for their live bytes first, until the unused bytes left are within max_unused)"),
    "repacked_pack_bytes": t(BYTES, "bytes of the packs repacked"),
    "repacked_live_bytes": t(BYTES, "live blob bytes downloaded, checked and uploaded again in new packs"),
    "repacked_objects": t(U, "objects copied into new packs"),
    "new_packs": t(U, "new packs the repack writes"),
    "max_unused": t(STR, "the limit: a percent (`5%`), a byte count, or `unlimited`"),
    "max_unused_bytes": t(null(BYTES), "the unused bytes that limit allows after gc (null: unlimited)"),
    "max_repack_bytes": t(null(BYTES), "--max-repack-size: at most these bytes of packs repacked (null: no bound)"),
    "pack_bytes_before": t(BYTES, "bytes of every pack on the remote before gc"),
    "pack_bytes_after": t(BYTES, "bytes of the packs after gc"),
    "bytes_freed": t(BYTES, "pack_bytes_before - pack_bytes_after"),
    "unused_bytes_before": t(BYTES, "pack bytes no reached object needs (its blob and trailer entry), before gc"),
    "unused_bytes_after": t(BYTES, "unused bytes left in the packs kept whole"),
    "kept_unreached": t(U, "unreached objects left in packs kept whole"),
    "pack_usage": t(arr(obj("PackUsage", {
        "pack": t(STR, "the pack's object key"),
        "bytes": t(BYTES, "its size"),
        "live_bytes": t(BYTES, "sealed bytes of the reached objects the index places there"),
        "unused_bytes": t(BYTES, "what repacking it would free: its size less what its live objects need (blobs and trailer entries)"),
        "action": t(enum("keep", "repack", "remove"), "what gc does to it"),
    }, text="One pack of the remote as gc --remote's plan sees it.")), "every pack on the remote before gc, by key"),
    "index_files_replaced": t(U, "index files merged into one"),
    "reached_objects": t(U, "objects the remote's refs reach"),
    "applied": t(BOOL, "false with --dry-run (the plan), true when done"),
}, text="What `gc --remote NAME` removes (`--dry-run`) or removed on the remote.")

command("gc", "gc", {"oneOf": [GC, REMOTE_GC], "x-type": "GcReport or RemoteGcPlan"},
        "The same report for `gc --dry-run` (the plan) and `gc` (done): a GcReport of the store, or with `--remote NAME` a RemoteGcPlan of the remote.",
        "ckptfs gc STORE --keep-last 10 --dry-run --json")

command("export", "export", obj("ExportReport", {
    "file": t(PATH, "the archive written"),
    "sha256": t(HEX64, "SHA-256 of the whole archive (all parts in order)"),
    "bytes": t(BYTES, "its size"),
    "parts": t(arr(obj("PartDigest", {
        "path": t(PATH, "the part file"),
        "sha256": t(HEX64, "its SHA-256"),
        "bytes": t(BYTES, "its size"),
    })), "the files written (one without --split)"),
    "sidecar": t(PATH, "FILE.sha256"),
    "checkpoints": t(U, "checkpoints exported"),
    "objects": t(U, "objects exported"),
    "object_bytes": t(BYTES, "their bytes in the store"),
    "branches": t(arr(STR), "branches exported"),
    "labels": t(arr(STR), "labels exported"),
}), "What export wrote. `archive` is the same command (its older name), with the same output.", "ckptfs export STORE --all --out FILE --json")

command("import", "import", obj("ImportReport", {
    "store": t(PATH, "the store imported into"),
    "created_store": t(BOOL, "it was created"),
    "sha256": t(HEX64, "the archive's SHA-256, checked"),
    "checkpoints_new": t(U, "records imported"),
    "checkpoints_present": t(U, "records already there"),
    "objects_new": t(U, "objects imported"),
    "objects_present": t(U, "objects already there"),
    "branches": t(arr(STR), "branches in the archive"),
    "labels": t(arr(STR), "labels in the archive"),
    "relocated": t(mapof(PATH, "path"), "roots recorded at a new path (--relocate)"),
    "roots_added": t(mapof(PATH, "path"), "roots STORE.json did not have (every root of a created store; into an existing one only those named by --add-root or --relocate): directories a capture now reads"),
    "upgraded_to": t(U, "the existing store's new format version, when it had to change"),
}, optional=["upgraded_to"]), "What import imported. `unarchive` is the same command (its older name, which also takes `FILE STORE`), with the same output.", "ckptfs import STORE FILE --json")

DIFFERENCE = obj("RuntimeDifference", {
    "field": t(STR, "`platform.kernel`, `file:/usr/bin/agent`, `command:python3 --version`"),
    "recorded": t(null(STR), "as recorded (null: the recorded fingerprint has no such field)"),
    "now": t(null(STR), "as it is now (null: not part of the current declaration)"),
}, text="One field that differs between a branch's recorded fingerprint and this machine's.")

TURN_REPORT_FIELDS = {
    "turn": t(TURN_ID, "the turn (as `log --turns`, the audit log and the record's `turn.id` name it)"),
    "branch": t(STR, "its branch"),
    "outcome": t(enum(*TURN_OUTCOMES), "`ok` (one checkpoint recorded); `failed` (non-zero exit), `killed` (a signal), `cannot-run` (127/126), `checkpoint-failed` (COMMAND exited 0, its checkpoint could not be taken): nothing recorded"),
    "exit_status": t(STATUS, "what `turn` exits with: COMMAND's status, 128+N for a signal N, 127/126, 1 for `checkpoint-failed`"),
    "signal": t(INT, "the signal that killed COMMAND (only for `killed`)"),
    "uid": t(U, "the uid COMMAND ran as: the owner of the workspace's (first) root, `--user`'s, 0 only with `--as-root`; the invoking user's when ckptfs is not root"),
    "checkpoint": t(null(ID), "the checkpoint recorded (only when `ok`)"),
    "parent": t(ID, "the branch head the turn started from"),
    "started": t(TIME, "when COMMAND started"),
    "ended": t(TIME, "when it ended"),
    "elapsed_ms": t(U, "time taken, the checkpoint included"),
    "mounted": t(BOOL, "the turn mounted the branch (it was not mounted)"),
    "set_aside": t(PATH, "with `--retry`: where a failed turn's writes were set aside (absent otherwise)"),
    "runtime": t(obj("RuntimeCheck", {
        "now": t(RUNTIME, "the fingerprint now (recorded with the checkpoint)"),
        "recorded_in": t(null(ID), "the checkpoint whose fingerprint was compared (null: the branch records none)"),
        "differences": t(arr(DIFFERENCE), "what differs (empty: the same runtime)"),
        "accepted": t(BOOL, "the differences were accepted (`--accept-runtime-change`, audited)"),
    }), "the runtime check made before COMMAND ran"),
    "left_running": t(arr(STR), "processes of the turn still running 15 s after COMMAND exited, as `PID (COMMAND)` (frozen for the checkpoint; absent when none)"),
    "error": t(STR, "what went wrong: why COMMAND could not run (`cannot-run`), its checkpoint could not be taken (`checkpoint-failed`), or (agent turns) why the agent's turn failed; absent otherwise"),
}
TURN_REPORT_OPTIONAL = ["signal", "set_aside", "left_running", "error"]
command("turn", "turn", obj("TurnReport", TURN_REPORT_FIELDS, optional=TURN_REPORT_OPTIONAL),
    "One turn: printed on stdout after COMMAND's own output, also when COMMAND failed (the exit status is then COMMAND's). A turn refused before COMMAND ran prints no JSON (one line on stderr, exit 1 or 2). docs/runner.md describes the contract.",
    "ckptfs turn ROOM --json -- python3 agent.py")

SETTINGS_FIELDS = {
    "agent": t(enum("codex", "claude"), "the agent CLI"),
    "binary": t(PATH, "the agent CLI's path"),
    "version": t(STR, "its version"),
    "version_accepted": t({"const": True, "x-type": "true"}, "a version ckptfs was not tested with, accepted (`--accept-agent-version`, audited); absent otherwise"),
    "workspace": t(PATH, "the workspace root's path (the agent's working directory)"),
    "home": t(PATH, "the agent's home root's path (CODEX_HOME / CLAUDE_CONFIG_DIR)"),
    "model": t(STR, "`--model` (absent when not given)"),
    "policy": t(mapof(STR, "string"), "approval and sandbox policy (Codex: `approval_policy`, `sandbox`; Claude Code: `permission_mode`)"),
    "agent_args": t(arr(STR), "`--agent-arg`s given at init, passed on every turn (absent when none)"),
    "auth_source": t(PATH, "the login file lent to each turn: its path, never its bytes (absent when none)"),
    "user": t(STR, "`--user` the agent runs as (absent: the workspace's owner)"),
    "as_root": t({"const": True, "x-type": "true"}, "the agent runs as root (`--as-root`); absent otherwise"),
}
SETTINGS_OPTIONAL = ["version_accepted", "model", "agent_args", "auth_source", "user", "as_root"]
BINDING = obj("AgentBinding", {
    **SETTINGS_FIELDS,
    "session": t(STR, "the native session: Codex thread id, Claude Code session id (absent before the first turn)"),
    "turn": t(STR, "the completed turn's native id: Codex turn id, Claude Code final message uuid"),
    "reply": t(STR, "the final reply (its first 16 KiB)"),
    "reply_sha256": t(HEX64, "SHA-256 of the whole final reply"),
    "session_file": t(PATH, "the session file (under the home)"),
    "session_file_len": t(BYTES, "its length at the turn's end"),
    "turn_args": t(arr(STR), "`--agent-arg`s of this turn (absent when none)"),
    "forked_from": t(obj("ForkOrigin", {
        "session": t(STR, "the session forked"),
        "turn": t(STR, "through this turn"),
        "checkpoint": t(ID, "the checkpoint forked"),
    }, optional=["turn"]), "set by `agent fork` and kept by the fork's turns (absent otherwise)"),
    "fork_pending": t(STR, "Claude Code: the session the branch's first turn forks natively (absent otherwise)"),
}, optional=SETTINGS_OPTIONAL + ["session", "turn", "reply", "reply_sha256", "session_file",
                                 "session_file_len", "turn_args", "forked_from", "fork_pending"],
    text="What an agent checkpoint binds (docs/agents.md), as its `agent.*` meta keys hold it.")

command("agent-init", "agent init", obj("AgentInitReport", {
    "store": t(PATH, "the store made"),
    "checkpoint": t(ID, "its first checkpoint (binding the settings, no session yet)"),
    "branch": t(STR, "its branch (`main`)"),
    **SETTINGS_FIELDS,
}, optional=SETTINGS_OPTIONAL), "A store made for an agent's room.",
    "ckptfs agent init STORE --agent codex --workspace /srv/room --home /srv/home --json")

AGENT_REPORT = obj("AgentReport", {
    **TURN_REPORT_FIELDS,
    "binding": t(BINDING, "what the checkpoint binds (only when `ok`)"),
}, optional=TURN_REPORT_OPTIONAL + ["binding"])
command("agent-turn", "agent turn", AGENT_REPORT,
    "One agent turn: the turn's report (as `turn --json`, `command` being the agent's) and the binding. Printed also when the turn failed (exit status non-zero).",
    "ckptfs agent turn STORE --message 'fix the test' --json")
command("agent-fork", "agent fork", AGENT_REPORT,
    "A native fork, recorded as the new branch's first checkpoint: as `agent turn`.",
    "ckptfs agent fork STORE t1 try-2 --json")
command("agent-log", "agent log", arr(obj("AgentLogRow", {
    **TURN_ROW_FIELDS,
    "kind": t(enum("turn", "fork"), "an `agent turn` or an `agent fork`"),
    "binding": t(BINDING, "what its checkpoint binds (absent when it recorded none)"),
}, optional=["binding"])), "Agent turns and forks from the audit log, newest first, with what their checkpoints bind.",
    "ckptfs agent log STORE --json")

command("fingerprint", "fingerprint", obj("FingerprintReport", {
    "declared": t(obj("RuntimeDeclaration", {
        "files": t(arr(STR), "files declared (`--file`: absolute paths or names looked up in PATH)"),
        "commands": t(arr(STR), "command lines declared (`--command`)"),
    }), "what the fingerprint is made of: with `--branch B`, the declaration B uses (its own, else the store's)"),
    "fingerprint": t(RUNTIME, "this machine's fingerprint under that declaration"),
    "branch": t(null(STR), "`--branch`, or null"),
    "recorded_in": t(null(ID), "with `--branch`: the checkpoint whose fingerprint the branch records (the newest on its line of first parents that has one); null without `--branch` or when none has"),
    "recorded": t(null(RUNTIME), "that recorded fingerprint (null as `recorded_in`)"),
    "differences": t(arr(DIFFERENCE), "recorded against now, field by field (empty without `--branch` or when the same; exit 1 when not empty)"),
}), "The same shape in every mode: `fingerprint STORE` (this machine's), `--branch B` (compared with B's recorded fingerprint), `--file`/`--command` (declare, then print the fingerprint under the new declaration), `--clear` (remove the declaration: platform only).",
    "ckptfs fingerprint STORE --branch main --json")

command("doctor", "doctor", obj("DoctorReport", {
    "store": t(PATH, "the store checked"),
    "checkpoints": t(U, "checkpoints found"),
    "objects_checked": t(U, "objects whose presence and size were checked"),
    "content_checked": t({"const": False, "x-type": "bool"}, "always `false`: doctor checks objects' presence and sizes, never their contents (a flipped byte passes)"),
    "content_check": t(STR, "the command that does: `ckptfs verify STORE` (hashes every object)"),
    "findings": t(arr(obj("DoctorFinding", {
        "severity": t(enum("error", "warning", "info"), "how bad"),
        "check": t(enum("format", "permissions", "ref", "object", "marker", "pin", "socket",
                        "temp", "mount", "layout", "security", "garbage", "rootless"), "which check found it"),
        "subject": t(STR, "what it is about"),
        "detail": t(STR, "what is wrong"),
        "fix": t(STR, "how to fix it"),
        "repair": t(enum("recover", "gc", ""), "the command that repairs it (empty: by hand)"),
    })), "every finding (exit 1 on an error or warning)"),
}), "The store's invariants checked.", "ckptfs doctor STORE --json")

command("mount", "mount --branch", WORKSPACE_STATE, "The workspace mounted (only with --branch; a read-only mount prints no JSON).",
        "ckptfs mount STORE --branch main --json")

WORKSPACE_ROW = obj("WorkspaceStatus", {
    "kind": t(const("workspace"), "a workspace row"),
    "branch": t(STR, "its branch"),
    "live": t(BOOL, "its overlay is mounted and serving"),
    "base": t(ID, "the checkpoint its lower layer shows"),
    "head": t(null(ID), "its branch's head"),
    "mountpoint": t(PATH, "its first root's mountpoint"),
    "mountpoints": t(mapof(PATH, "path"), "each root's mountpoint"),
    "dirty": t(BOOL, "changes not checkpointed"),
    "files_changed": t(U, "files changed"),
    "bytes_changed": t(BYTES, "their bytes"),
    "special_files": t(arr(obj("SpecialFile", {
        "path": t(PATH, "where the workspace shows it"),
        "kind": t(enum("fifo", "socket", "char device", "block device"), "what it is"),
    })), "FIFOs, sockets and devices its checkpoints would fail on"),
    "changes": t(arr(CHANGE), "what changed since the last checkpoint, path by path"),
    "error": t(STR, "why its changes could not be told (it is then not reported clean)"),
    "freeze_cgroups": t(arr(PATH), "cgroups its checkpoints freeze"),
    "freeze_fs": t(BOOL, "its checkpoints freeze the store's filesystem"),
    "unheld_writers": t(arr(obj("Writer", {
        "pid": t(U, "process id"),
        "command": t(STR, "its command name"),
        "path": t(PATH, "a file it has open for writing"),
    })), "processes writing into it that its checkpoints do not hold"),
    "turn": t(obj("TurnState", {
        "turn": t(TURN_ID, "the turn"),
        "state": t(enum("running", "interrupted", "failed"), "`running` (its runner is alive), `interrupted` (its runner died: run `recover`), `failed` (its writes are the workspace's changes)"),
        "describe": t(STR, "one sentence saying so and what to run"),
        "outcome": t(enum("failed", "killed", "cannot-run", "checkpoint-failed", "crashed"), "for `failed`: the outcome recorded"),
        "exit_status": t(null(INT), "for `failed`: its exit status, if one was recorded"),
        "time": t(TIME, "for `failed`: when it ended (or was found crashed)"),
    }, optional=["outcome", "exit_status", "time"]),
        "a turn running on its branch, or the failed turn whose writes it holds (absent when neither)"),
    "fold_waiting": t(FOLD, "the upper layer's bytes the last checkpoint recorded, waiting to be folded, and who holds them (zero once folded)"),
    "merge": t(obj("MergeStatus", {
        "source": t(STR, "what is merged in, as given to `merge`"),
        "theirs": t(ID, "the checkpoint merged in"),
        "ours": t(ID, "the branch head when the merge started (what `merge --abort` puts back)"),
        "interrupted": t(BOOL, "cut short while being written into the workspace: run `merge --abort`"),
        "conflicts": t(arr(obj("MergeConflictStatus", {
            "path": t(STR, "`ROOT/PATH`"),
            "kind": t(STR, "as in the merge report (`content`, `modify-delete`, ...)"),
            "resolved": t(BOOL, "resolved in the workspace as it is now: no conflict marker left in a text file, or anything else changed there, or `--take` wrote one side"),
            "taken": t(enum("ours", "theirs"), "the side `merge --take` wrote there"),
        }, optional=["taken"])), "the conflicts the merge left in the workspace"),
    }), "a merge in progress in it (absent when none): once every conflict is resolved, the next checkpoint records the merge"),
}, optional=["error", "turn", "merge"])
LEFT_BEHIND_ROW = obj("LeftBehindStatus", {
    "kind": t(const("left-behind"), "a tree a switch or a fold set aside, still mounted because processes are inside"),
    "branch": t(STR, "the branch whose tree it is"),
    "at": t(PATH, "where it is mounted now"),
    "readonly": t(BOOL, "writes into it fail with EROFS (false: a file open for writing kept it writable)"),
    "holders": t(arr(HOLDER), "who is inside"),
})
PARKED_ROW = obj("ParkedStatus", {
    "kind": t(const("parked"), "a branch whose overlays a switch away parked (kept mounted read-only) for a switch back"),
    "branch": t(STR, "the branch"),
    "base": t(ID, "the checkpoint its overlays stack on"),
    "mountpoints": t(mapof(PATH, "path"), "each root's mountpoint in the workspace it left (where a switch back shows it)"),
    "at": t(mapof(PATH, "path"), "where each root's overlay is parked"),
    "parked": t(TIME, "when it was parked"),
    "upper_files": t(U, "files in its upper layer, waiting while it is parked"),
    "upper_bytes": t(BYTES, "their bytes"),
})
VIEW_ROW = obj("ViewStatus", {
    "kind": t(const("view"), "a read-only view row"),
    "mountpoint": t(PATH, "where it is mounted"),
    "source": t(STR, "its mount source (`ckptfs:STORE:WHAT`)"),
    "state": t(null(obj("MountState", {
        "pid": t(U, "the daemon's pid"),
        "mountpoint": t(PATH, "where it is mounted"),
        "fsname": t(STR, "its fsname"),
        "kind": t(enum("checkpoint", "browse"), "one checkpoint's root, or the browse namespace"),
        "checkpoint": t(null(ID), "the checkpoint shown"),
        "root": t(null(STR), "the root shown"),
        "started": t(TIME, "when the daemon started"),
    })), "the daemon's state (null for a mount without one)"),
})
command("status", "status", arr({"oneOf": [WORKSPACE_ROW, LEFT_BEHIND_ROW, PARKED_ROW, VIEW_ROW], "x-type": "WorkspaceStatus, LeftBehindStatus, ParkedStatus or ViewStatus"},
                                "WorkspaceStatus, LeftBehindStatus, ParkedStatus or ViewStatus"),
        "Live mounts: workspaces (`kind: \"workspace\"`), trees left behind by a switch (`kind: \"left-behind\"`), branches a switch parked (`kind: \"parked\"`), then read-only views (`kind: \"view\"`).",
        "ckptfs status STORE --json")

# --- Remotes (docs/remote.md) ---------------------------------------------------------

BRANCH_HEADS = mapof(ID, "id")
command("remote-add", "remote add", obj("RemoteAdded", {
    "name": t(STR, "the remote's name in this store"),
    "url": t(STR, "`s3://BUCKET/PREFIX`"),
    "endpoint": t(null(STR), "`--endpoint` (null: AWS)"),
    "region": t(null(STR), "`--region` (null: AWS_REGION, else us-east-1)"),
    "encrypted": t(BOOL, "the remote is encrypted (false only for one made with --no-encryption)"),
}), "The remote added.", "ckptfs remote add STORE origin s3://ckpt/rooms/a --endpoint http://127.0.0.1:3900 --region garage --json")

command("remote-list", "remote list", arr(obj("RemoteRow", {
    "name": t(STR, "the remote's name"),
    "url": t(STR, "`s3://BUCKET/PREFIX`"),
    "endpoint": t(null(STR), "`--endpoint` (null: AWS)"),
    "region": t(null(STR), "`--region` (null: the default)"),
    "cache_bytes": t(BYTES, "bytes of lazily fetched objects kept before the oldest are evicted"),
    "timeout_ms": t(U, "milliseconds a request may go without an answer before it is given up (`--timeout`, default 10000)"),
    "branches": t(BRANCH_HEADS, "the remote's branches and their heads, as last seen (push, fetch)"),
    "labels": t(BRANCH_HEADS, "the remote's labels and their checkpoints, as last seen"),
})), "The store's remotes, by name.", "ckptfs remote list STORE --json")

command("remote-remove", "remote remove", obj("RemoteRemoved", {
    "removed": t(STR, "the remote forgotten here (nothing on the remote changed)"),
}), "The remote removed.", "ckptfs remote remove STORE origin --json")

REF_MOVE = obj("RefMove", {
    "old": t(null(ID), "the head before (null: a new branch)"),
    "new": t(ID, "the head now"),
}, text="A branch moved from one head to another.")

command("push", "push", obj("PushReport", {
    "remote": t(STR, "the remote pushed to"),
    "objects": t(U, "objects uploaded (0: the remote had them all)"),
    "bytes": t(BYTES, "bytes uploaded in packs (compressed, sealed)"),
    "packs": t(U, "packs uploaded"),
    "records": t(U, "checkpoint records uploaded"),
    "branches": t(mapof(REF_MOVE), "remote branches moved, by name"),
    "labels": t(arr(STR, "name"), "labels created on the remote"),
    "recovered": t(U, "objects indexed from packs an interrupted push left without an index"),
    "forgotten": t(U, "checkpoints forgotten in this store whose tombstones this push published (gc --remote collects them)"),
}), "What push uploaded and moved; a push with nothing new has zero counts and empty `branches` and `labels`.", "ckptfs push STORE origin --json")

FETCH = obj("FetchReport", {
    "remote": t(STR, "the remote fetched from"),
    "records": t(U, "checkpoint records brought into the store"),
    "branches": t(BRANCH_HEADS, "the remote's branches and their heads"),
    "labels": t(BRANCH_HEADS, "the remote's labels and their checkpoints"),
    "created_branches": t(arr(STR, "name"), "local branches created for remote branches the store did not have"),
    "created_labels": t(arr(STR, "name"), "local labels created"),
    "remote_objects": t(U, "objects the remote holds (fetched lazily, when read)"),
    "forgotten": t(U, "checkpoints forgotten on the remote, stepped over (a tombstone written here for each the store had no record of)"),
}, text="What a clone or fetch brought: refs and records; objects stay on the remote until read.")

command("clone", "clone", FETCH, "What clone brought into the new store.",
        "ckptfs clone s3://ckpt/rooms/a STORE --endpoint http://127.0.0.1:3900 --region garage --json")
command("fetch", "fetch", FETCH, "The same report as clone's.", "ckptfs fetch STORE origin --json")
command("pull", "pull", obj("PullReport", {
    "fetch": t(FETCH, "the fetch pull starts with"),
    "forwarded": t(mapof(REF_MOVE), "local branches fast-forwarded to the remote's head, by name"),
    "skipped": t(mapof(STR, "string"), "local branches left alone, with why (exit 1 when any)"),
}), "What pull fetched and fast-forwarded.", "ckptfs pull STORE origin --json")

# --- Output ---------------------------------------------------------------------------

def to_schema(s, defs):
    """Strips the x- annotations; named objects become $defs."""
    if isinstance(s, tuple):
        s = s[0]
    if "x-name" in s:
        name = s["x-name"]
        if name not in defs:
            defs[name] = None  # placeholder against recursion
            props = {k: to_schema(v, defs) for k, v in s["properties"].items()}
            for k, v in s["properties"].items():
                props[k]["description"] = v[1]
            body = {"type": "object", "properties": props,
                    "required": [k for k in s["properties"] if k not in s["x-optional"]],
                    "additionalProperties": False}
            if s["x-text"]:
                body["description"] = s["x-text"]
            defs[name] = body
        return {"$ref": f"#/$defs/{name}"}
    out = {}
    for k, v in s.items():
        if k.startswith("x-"):
            continue
        if k in ("items", "additionalProperties", "propertyNames"):
            out[k] = to_schema(v, defs) if isinstance(v, dict) else v
        elif k in ("anyOf", "oneOf"):
            out[k] = [to_schema(x, defs) for x in v]
        else:
            out[k] = v
    return out


def write_schemas():
    # A schema file no command describes any more (a renamed command's) goes.
    names = {c[0] for c in COMMANDS}
    for f in os.listdir(HERE):
        if f.endswith(".json") and f[:-5] not in names:
            os.remove(os.path.join(HERE, f))
    for name, title, schema, text, example in COMMANDS:
        defs = {}
        root = to_schema(schema, defs)
        doc = {"$schema": "https://json-schema.org/draft/2020-12/schema",
               "title": f"ckptfs {title} --json",
               "description": f"{text} See docs/json.md.",
               **root}
        if defs:
            doc["$defs"] = dict(sorted(defs.items()))
        with open(os.path.join(HERE, f"{name}.json"), "w") as f:
            json.dump(doc, f, indent=2, ensure_ascii=False)
            f.write("\n")


def tables():
    """The field tables of docs/json.md: a section per command, then the shared objects."""
    out = []
    shared = {}

    def collect(s):
        if isinstance(s, tuple):
            s = s[0]
        if not isinstance(s, dict):
            return
        if "x-name" in s:
            if s["x-name"] in shared:
                return
            shared[s["x-name"]] = s
            for v in s["properties"].values():
                collect(v)
            return
        for k in ("items", "additionalProperties"):
            if isinstance(s.get(k), dict):
                collect(s[k])
        for x in s.get("anyOf", []) + s.get("oneOf", []):
            collect(x)

    def table(o):
        rows = ["| field | type | meaning |", "|---|---|---|"]
        for k, (fs, ftext) in o["properties"].items():
            opt = " *(optional)*" if k in o["x-optional"] else ""
            ty = typename(fs).replace("|", "\\|")
            rows.append(f"| `{k}`{opt} | {ty} | {ftext.replace('|', '/')} |")
        return "\n".join(rows) + "\n"

    primaries = {}
    for name, title, schema, text, example in COMMANDS:
        collect(schema)
        top = schema.get("items", schema) if isinstance(schema, dict) else schema
        if "x-name" in top:
            primaries.setdefault(top["x-name"], title)
    for name, title, schema, text, example in COMMANDS:
        out.append(f"### `{title}`\n")
        out.append(f"Schema: [schema/{name}.json](schema/{name}.json). Example: `{example}`.\n")
        out.append(f"{text} Top level: **{typename(schema)}**.\n")
        top = schema.get("items", schema)
        if "x-name" in top and primaries.get(top["x-name"]) == title:
            out.append(f"{top['x-name']}:\n")
            out.append(table(top))
    out.append("### Objects\n")
    out.append("The objects the commands above share or nest. Fields marked *optional* are "
               "absent when they do not apply; every other field is always there (possibly "
               "`null` where its type says so).\n")
    for oname in sorted(shared):
        if oname in primaries:
            continue
        s = shared[oname]
        out.append(f"#### {oname}\n")
        if s["x-text"]:
            out.append(s["x-text"] + "\n")
        out.append(table(s))
    return "\n".join(out)


def write_doc():
    with open(DOC) as f:
        doc = f.read()
    begin, end = "<!-- BEGIN GENERATED (docs/schema/gen.py) -->", "<!-- END GENERATED -->"
    pat = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    if not pat.search(doc):
        sys.exit(f"{DOC}: no generated section markers")
    doc = pat.sub(lambda _: f"{begin}\n\n{tables()}\n{end}", doc)
    with open(DOC, "w") as f:
        f.write(doc)


if __name__ == "__main__":
    write_schemas()
    write_doc()
