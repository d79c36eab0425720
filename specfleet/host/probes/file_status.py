"""The shared file checks of a specfleet host's status read (facts.FILES runs it; facts.parse_file_checks parses
it): the size of each path in SIZES, the kind, mode, owner and sha256 of each path in FILES, the groups of each user
in USERS, the kind, mode, owner and size of each path in STATS (not opened), and the first line of each public key
file in KEYS (newline-separated lists, from the environment, asked for by every part of the read), as
`key<TAB>value` lines. Read-only, stdlib only.

It is one process because the shell loop it replaces ran four to six programs per path: on a slow host (an
emulated guest) that was 3 of the probe's 7 seconds, on every converge.

    size  <bytes, -1 if missing (links followed)>  <path>
    file  link|<target> | dir|<mode>|<user>|<group> | file|<mode>|<user>|<group>|<sha256>  <path>   (missing: none)
    groups  <user>  <names, primary first> | (missing)
    stat    file|dir|other|<mode>|<user>|<group>|<size>  <path>   (STATS: never opened; missing: none)
    pubkey  <path>  <its first line, at most 300 bytes>   (missing or unreadable: none)
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import stat
import sys

TYPE_CHECKING = False  # this runs on every status read: importing typing (tens of ms) is left to mypy
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


def out(*fields: str) -> None:
    sys.stdout.buffer.write(b"\t".join(os.fsencode(f) for f in fields) + b"\n")


def paths(var: str) -> list[str]:
    return [p for p in os.environ.get(var, "").split("\n") if p]


def name(lookup: Callable[[int], tuple[Any, ...]], ident: int) -> str:
    try:
        return str(lookup(ident)[0])
    except KeyError:
        return "UNKNOWN"  # what stat -c %U/%G prints for an id without a name


def sha256(path: str) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return ""
    return h.hexdigest()


def describe(path: str) -> str | None:
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            return "link|" + os.readlink(path)
        st = os.stat(path)
    except OSError:
        return None
    owner = f"{stat.S_IMODE(st.st_mode):o}|{name(pwd.getpwuid, st.st_uid)}|{name(grp.getgrgid, st.st_gid)}"
    if stat.S_ISDIR(st.st_mode):
        return "dir|" + owner
    if stat.S_ISREG(st.st_mode):
        return f"file|{owner}|{sha256(path)}"
    return None


def groups(user: str) -> str:
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return "(missing)"
    names = []
    for gid in [pw.pw_gid] + os.getgrouplist(user, pw.pw_gid):
        n = name(grp.getgrgid, gid)
        if n not in names:
            names.append(n)
    return " ".join(names)


def main() -> None:
    for path in paths("SIZES"):
        try:
            out("size", str(os.stat(path).st_size), path)
        except OSError:
            out("size", "-1", path)
    for path in paths("FILES"):
        desc = describe(path)
        if desc is not None:
            out("file", desc, path)
    for user in paths("USERS"):
        out("groups", user, groups(user))
    for path in paths("STATS"):  # only stat'ed, never opened (a private key): kind, mode, owner, size
        try:
            st = os.lstat(path)
        except OSError:
            continue
        kind = "file" if stat.S_ISREG(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else "other"
        out("stat", f"{kind}|{stat.S_IMODE(st.st_mode):o}|{name(pwd.getpwuid, st.st_uid)}|"
                    f"{name(grp.getgrgid, st.st_gid)}|{st.st_size:d}", path)
    for path in paths("KEYS"):  # public halves only: a pair's MPI key (.pub) and a worker's sshd host key
        try:
            with open(path, "rb") as f:
                line = f.readline(300).rstrip(b"\r\n")
        except OSError:
            continue
        out("pubkey", path, line.decode("ascii", "replace").replace("\t", " "))


if __name__ == "__main__":  # python3 -I -S -c "$FILE_STATUS"
    main()
