"""What each kind of string may be: the grammars of the values specfleet reads from the user (the settings) and back
from the hosts (pinned versions).

Every inventory string reaches a shell, a systemd unit, a path or a URL on some host. Each is validated by what it is:
a `check_*` function returns the value (normalized where said) or raises ValueError naming what is allowed, which the
Settings model reports as one line. The use sites quote it for where it goes as well (shlex.quote,
render.systemd_word).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from ..serving.options import check_path, show

_PINNED = re.compile(r"(?P<name>[A-Za-z0-9_.-]+)(?:\[[A-Za-z0-9_,-]+\])? ?== ?(?P<version>[A-Za-z0-9.]+)")


def pinned_version(requirement: str, package: str) -> str | None:
    """The exact version of `package==X` (extras and spaces around == allowed); None for any other specifier."""
    m = _PINNED.fullmatch(requirement.strip())
    return m.group("version") if m and m.group("name") == package else None


# ---- URLs and addresses ----------------------------------------------------------------------------------------
URL_RULE = ("allowed: http:// or https://, a host name or IP address, an optional :port (1-65535), a path of "
            "letters, digits, '-', '.', '_', '~', '/' and %XX escapes; no user:password@, no ?query, no #fragment")
_URL_CHARS = re.compile(r"[A-Za-z0-9._~%/:\[\]@?#=&-]*")  # what may appear at all (the last ones to say why not)
_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"{_HOST_LABEL}(?:\.{_HOST_LABEL})*")
_URL_PATH = re.compile(r"(?:/(?:[A-Za-z0-9._~-]|%[0-9A-Fa-f]{2})*)*")


def check_url(value: str | None) -> str | None:
    """An http(s) URL without credentials, query or fragment (None stays None); the trailing '/' is dropped."""
    if value is None:
        return None
    problem = url_problem(value)
    if problem:
        raise ValueError(f"{show(value)} {problem} ({URL_RULE})")
    return value.rstrip("/")


def url_problem(value: str) -> str | None:
    if len(value) > 2000:
        return "is longer than 2000 characters"
    if not _URL_CHARS.fullmatch(value):
        bad = "".join(sorted({c for c in value if not _URL_CHARS.fullmatch(c)}))
        return f"has characters that are not allowed: {bad!r}"
    scheme, sep, rest = value.partition("://")
    if not sep or scheme not in ("http", "https"):
        return "is not an http:// or https:// URL"
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        return "has user info (user:password@); credentials must not live in URLs"
    if "?" in value or "#" in value:
        return "has a query (?) or a fragment (#)"
    problem = _authority_problem(authority)
    if problem:
        return problem
    if not _URL_PATH.fullmatch(slash + path):
        return "has a path with characters that are not allowed (or a '%' not followed by two hex digits)"
    return None


def _authority_problem(authority: str) -> str | None:
    """What is wrong with a URL's host and port: a bracketed IPv6 address, an IPv4 address or a host name, then an
    optional port."""
    port: str | None
    if authority.startswith("["):
        host, bracket, port = authority[1:].partition("]")
        if not bracket or (port and not port.startswith(":")):
            return f"has a malformed IPv6 address {authority!r}"
        port = port[1:] if port else None
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"has a malformed IPv6 address {authority!r}"
    else:
        host, colon, port = authority.partition(":")
        port = port if colon else None
        if re.fullmatch(r"[0-9.]+", host):
            try:
                ipaddress.IPv4Address(host)
            except ValueError:
                return f"has a malformed IPv4 address {host!r}"
        elif not _HOSTNAME.fullmatch(host) or len(host) > 253:
            return f"has no valid host name ({host!r})"
    if port is not None and not (re.fullmatch(r"[0-9]{1,5}", port) and 1 <= int(port) <= 65535):
        return f"has a port {port!r} that is not a number from 1 to 65535"
    return None


def check_address(value: str | None) -> str | None:
    """A host name or IP address the fleet hosts can put in a URL (mirror_address; None stays None)."""
    if value is None:
        return value
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    if len(value) > 253 or not _HOSTNAME.fullmatch(value):
        raise ValueError(f"{show(value)} is not a host name or IP address "
                         "(allowed: letters, digits, '-' and '.', or an IPv4/IPv6 address)")
    return value


def check_bind_address(value: str) -> str:
    """An IP address a service binds (mirror_bind)."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{show(value)} is not an IP address to bind "
                         "(0.0.0.0 for all interfaces, or one of the host's addresses)") from None
    return value


def check_serve_host(value: str) -> str:
    """The IP address trtllm-serve binds (serve_host): no IPv6 zone."""
    rule = "(127.0.0.1 for loopback, 0.0.0.0 for all interfaces)"
    if "%" in value:
        raise ValueError(f"{show(value)} has an IPv6 zone (%...); must be an IP address to bind {rule}")
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"must be an IP address to bind {rule}") from None
    return value


_HTTP_PATH = re.compile(r"/[A-Za-z0-9._~-]+(?:/[A-Za-z0-9._~-]+)*")


def check_http_path(value: str) -> str:
    """An absolute URL path matched literally by the gateway (gateway_health_path)."""
    if len(value) > 100 or not _HTTP_PATH.fullmatch(value):
        raise ValueError(f"{show(value)} is not a plain URL path (allowed: '/'-separated parts of letters, digits, "
                         "'.', '_', '~' and '-', e.g. /healthz; at most 100 characters)")
    return value


def check_networks(value: list[str]) -> list[str]:
    """A non-empty list of networks in CIDR form, normalized (mirror_allowed_networks)."""
    if not value:
        raise ValueError("is empty, so no host could reach the mirror "
                         "(allowed: a list of networks in CIDR form, e.g. [\"10.0.0.0/8\"])")
    out = []
    for net in value:
        try:
            out.append(str(ipaddress.ip_network(net, strict=False)))
        except ValueError:
            raise ValueError(f"{show(net)} is not a network in CIDR form "
                             "(allowed: e.g. 10.0.0.0/8, 192.168.1.20/32, fd00::/8)") from None
    return out


# ---- a two-Spark pair's link (pair/rules.py) -------------------------------------------------------------------
IFNAME_RULE = ("allowed: a Linux interface name, 1 to 15 letters, digits, '_', '.' or '-', not starting with '.' or "
               "'-', e.g. enp1s0f1np1")
_IFNAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}")  # the kernel's IFNAMSIZ (16 with the NUL), no '/' or ':'


def check_ifnames(value: list[str]) -> list[str]:
    """One to four distinct interface names (pair_link_interfaces: the CX-7 logical interfaces of the link)."""
    if not 1 <= len(value) <= 4:
        raise ValueError(f"has {len(value)} interfaces (allowed: 1 to 4 interface names, e.g. "
                         "[enp1s0f1np1, enP2p1s0f1np1])")
    for name in value:
        if not _IFNAME.fullmatch(name):
            raise ValueError(f"{show(name)} is not an interface name ({IFNAME_RULE})")
    if len(set(value)) != len(value):
        raise ValueError(f"names an interface twice: {show(value)} (allowed: distinct interfaces)")
    return value


def check_link_subnets(value: list[str]) -> list[str]:
    """IPv4 networks in CIDR form, one per link interface, normalized; no two overlap (one subnet per logical
    interface: NVIDIA's connect-two-sparks guidance, against the routing ambiguity of one shared subnet)."""
    nets = []
    for net in value:
        try:
            nets.append(ipaddress.IPv4Network(net))
        except ValueError:
            raise ValueError(f"{show(net)} is not an IPv4 network in CIDR form "
                             "(allowed: e.g. 192.168.100.0/24, host bits zero, prefix /8 to /30)") from None
        if not 8 <= nets[-1].prefixlen <= 30:
            raise ValueError(f"{show(net)} has prefix /{nets[-1].prefixlen} (allowed: /8 to /30: room for two hosts)")
    for i, a in enumerate(nets):
        for b in nets[i + 1:]:
            if a.overlaps(b):
                raise ValueError(f"{a} overlaps {b} (allowed: one subnet per link interface, apart from each other)")
    return [str(n) for n in nets]


def check_link_addresses(value: list[str] | None) -> list[str] | None:
    """IPv4 interface addresses in CIDR form (address/prefix), normalized; None stays None (derived from the role)."""
    if value is None:
        return value
    out = []
    for item in value:
        try:
            iface = ipaddress.IPv4Interface(item)
        except ValueError:
            iface = None
        if iface is None or "/" not in item:
            raise ValueError(f"{show(item)} is not an IPv4 address with its prefix (allowed: e.g. 192.168.100.10/24)")
        if iface.ip in (iface.network.network_address, iface.network.broadcast_address):
            raise ValueError(f"{show(item)} is the network or broadcast address of {iface.network} "
                             "(allowed: a host address of the subnet)")
        out.append(str(iface))
    return out


# ---- paths and text --------------------------------------------------------------------------------------------
_PYTHON = re.compile(r"(?:/[A-Za-z0-9._-]+)+|python3(?:\.[0-9]{1,2})?")


def check_abs_dir(value: str) -> str:
    """An absolute directory on the host; the trailing '/' is dropped."""
    check_path(value)
    return value.rstrip("/")


def check_python(value: str) -> str:
    """An interpreter name or absolute path (mirror_python)."""
    if not _PYTHON.fullmatch(value) or ".." in value:
        raise ValueError(f"{show(value)} is not an interpreter name or absolute path (allowed: e.g. python3, "
                         "python3.12, /usr/bin/python3: letters, digits, '.', '_', '-', '/')")
    return value


def control_chars(value: str) -> str:
    """The control characters in `value` (sorted, each once): none may reach a file, a unit or a shell."""
    return "".join(sorted({c for c in value if ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f or c in "\u2028\u2029"}))


def check_token_file(value: str | None) -> str | None:
    """A path on the controller (hf_token_file; None stays None)."""
    problem = token_file_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def token_file_problem(value: Any) -> str | None:
    if isinstance(value, str) and control_chars(value):
        return (f"{show(value)} has control characters {control_chars(value)!r} "
                "(allowed: a path on the controller without newline, tab, NUL or other control characters)")
    return None


# ---- images, unit names, git refs, requirements ----------------------------------------------------------------
IMAGE_RULE = ("allowed: a container image reference [registry[:port]/]name[:tag][@sha256:digest], name parts of "
              "lowercase letters, digits, '.', '_', '-' starting with a letter or digit, at most 255 characters")
_IMG_ALNUM = r"[a-z0-9]+"
_IMG_COMPONENT = rf"{_IMG_ALNUM}(?:(?:[._]|__|-+){_IMG_ALNUM})*"
_IMG_DOMAIN_PART = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_IMG_DOMAIN = rf"{_IMG_DOMAIN_PART}(?:\.{_IMG_DOMAIN_PART})*(?::[0-9]+)?"
_IMG_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_IMG_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
# The reference grammar of distribution/reference (what `docker pull` accepts), ASCII only.
_IMAGE = re.compile(rf"(?:{_IMG_DOMAIN}/)?{_IMG_COMPONENT}(?:/{_IMG_COMPONENT})*(?::{_IMG_TAG})?(?:@{_IMG_DIGEST})?")

SERVICE_RULE = ("allowed: a systemd unit / docker container name without the .service suffix: letters, digits, "
                "'_', '.', '-', starting with a letter or digit, 2-64 characters")
_SERVICE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{1,63}")

REVISION_RULE = ("allowed: a branch, tag or commit: letters, digits, '.', '_', '-', '/', not starting with '-', '.' "
                 "or '/', no '..', '//' or '/.', not ending with '/', '.' or '.lock', at most 255 characters")
_REVISION = re.compile(r"[A-Za-z0-9._/-]{1,255}")

REQUIREMENT_RULE = ("allowed: huggingface_hub[extras] with one version specifier (==, ~=, >=, <=, !=, >, <) and a "
                    "version of letters, digits and '.', e.g. huggingface_hub==2.4.0")
_REQUIREMENT = re.compile(r"huggingface_hub(?:\[[A-Za-z0-9_-]+(?:,[A-Za-z0-9_-]+)*\])? "
                          r"?(?:==|~=|>=|<=|!=|>|<) ?[A-Za-z0-9.]+")

MIRROR_REQUIREMENT_RULE = ("allowed: olah with one version specifier and a version of letters, digits and '.', "
                           "e.g. olah==0.5.4")
_MIRROR_REQUIREMENT = re.compile(r"olah ?(?:==|~=|>=|<=|!=|>|<) ?[A-Za-z0-9.]+")


def check_image(value: str) -> str:
    if value.startswith("-"):
        raise ValueError(f"{show(value)} would be read as a docker option ({IMAGE_RULE})")
    if len(value) > 512 or not _IMAGE.fullmatch(value):
        raise ValueError(f"{show(value)} is not a container image reference ({IMAGE_RULE})")
    return value


REGISTRY_RULE = "allowed: a registry host name or address with an optional :port, as an image reference names it"


def check_registry(value: str) -> str:
    """A registry as the first part of an image reference names it (nvcr.io, 10.0.0.5:5000)."""
    if not re.fullmatch(_IMG_DOMAIN, value) or len(value) > 255:
        raise ValueError(f"{show(value)} is not a registry host[:port] ({REGISTRY_RULE})")
    return value


def check_service_name(value: str | None) -> str | None:
    """A unit and container name (None stays None: the engine's own)."""
    if value is None:
        return None
    if value.endswith(".service"):
        raise ValueError(f"{show(value)} ends with .service, which specfleet appends ({SERVICE_RULE})")
    if not _SERVICE.fullmatch(value):
        raise ValueError(f"{show(value)} is not a valid unit / container name ({SERVICE_RULE})")
    return value


def check_revision(value: str) -> str:
    """A git ref name (branch, tag) or commit, as `git check-ref-format` would accept it (a subset)."""
    if not _REVISION.fullmatch(value):
        bad = "".join(sorted({c for c in value if not _REVISION.fullmatch(c)}))
        raise ValueError(f"{show(value)} "
                         + (f"has characters that are not allowed: {bad!r}" if bad else "is empty or too long")
                         + f" ({REVISION_RULE})")
    if (value.startswith(("-", ".", "/")) or ".." in value or "//" in value or "/." in value
            or value.endswith(("/", ".", ".lock"))):
        raise ValueError(f"{show(value)} is not a valid git ref name ({REVISION_RULE})")
    return value


def check_hub_client_requirement(value: str) -> str:
    if not _REQUIREMENT.fullmatch(value):
        raise ValueError(f"{show(value)} is not a huggingface_hub requirement ({REQUIREMENT_RULE})")
    return value


def check_mirror_requirement(value: str) -> str:
    if not _MIRROR_REQUIREMENT.fullmatch(value):
        raise ValueError(f"{show(value)} is not an olah requirement ({MIRROR_REQUIREMENT_RULE})")
    return value


# Rules of the fields still checked by a pydantic `pattern`, for the message (by top-level field name).
PATTERN_RULES = {
    "operator_users": "allowed: an existing user name: lowercase letters, digits, '_', '-', starting with a letter "
                      "or '_', at most 32 characters",
    "rollback_to": "allowed: a release id r-<12 hex digits> as `specfleet releases` lists them, "
                   "or null for the previous",
}
