"""What a gateway host is now (GatewayStatus: one remote command, gateway/host/gateway_status.sh), for the gateway
deploy (gateway/steps/gateways.py) to decide on; and the gateway's part of a Spark's one status read (SPARK): the files
a Spark behind the gateways gets, and those a fleet that dropped its gateway group left behind."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field

from pyinfra.api import FactBase

from ..fleet.programs import program_text
from ..fleet.status import FileReads, StatusPart, Want, register, sha256
from ..host.layout import GatewayLayout
from ..plan import HostPlan
from .render import spark_files, spark_paths

_SCRIPT = program_text("gateway_status.sh")
NEEDED_FEATURES = ("LUA", "PROMEX")  # GET /v1/models (gateway/host/gateway_models.lua) and the Prometheus exporter


@dataclass
class GatewayState:
    haproxy: str = ""  # its version; "" when not installed
    features: tuple[str, ...] = ()  # HAProxy's `Feature list` entries built in (+NAME)
    active: str = ""
    enabled: str = ""
    admin: bool = False  # the runtime API socket exists (HAProxy runs with our config)
    dpkg_busy: tuple[str, ...] = ()
    files: dict[str, str] = field(default_factory=dict)  # path -> "mode|user|group|sha256"

    @property
    def missing_features(self) -> list[str]:
        return [f for f in NEEDED_FEATURES if f not in self.features]


def parse_gateway_state(lines: list[str]) -> GatewayState:
    st = GatewayState()
    for line in lines:
        key, _, rest = line.partition("\t")
        if key == "haproxy":
            st.haproxy = rest.strip()
        elif key == "features":
            st.features = tuple(f[1:] for f in rest.split() if f.startswith("+"))
        elif key in ("active", "enabled"):
            setattr(st, key, rest.strip())
        elif key == "admin":
            st.admin = rest.strip() == "yes"
        elif key == "dpkg_busy":
            st.dpkg_busy = tuple(rest.split())
        elif key == "file":
            desc, _, path = rest.partition("\t")
            st.files[path] = desc
    return st


class GatewayStatus(FactBase):
    """Everything the gateway deploy decides on, in one remote command."""

    def command(self, files: tuple[str, ...], layout: GatewayLayout = GatewayLayout()) -> str:
        env = {"FILES": "\n".join(files), "ADMIN": layout.admin_socket}
        return "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + "; " + _SCRIPT

    def process(self, output) -> GatewayState:
        return parse_gateway_state(list(output))


_ADMIN = program_text("haproxy_admin.py")


def admin_command(*args: str, layout: GatewayLayout = GatewayLayout()) -> str:
    """gateway/host/haproxy_admin.py on a gateway host, shipped on the command line (it holds no secret)."""
    return shlex.join(["python3", "-I", "-c", _ADMIN, "--socket", layout.admin_socket, *args])


class GatewayPool(FactBase):
    """Every server of a gateway's HAProxy: backend, server, status (UP, DOWN (agent), DRAIN, ...), sessions."""

    def command(self) -> str:
        return admin_command("state") + " 2>&1"

    def process(self, output):
        text = "\n".join(output)
        try:
            return {"servers": json.loads(text)}
        except ValueError:
            return {"error": text[-300:] or "no output"}


def _spark_reads(plan: HostPlan) -> FileReads:
    """Left over from a gateway group the fleet no longer has: the cleanup removes them."""
    return FileReads(files=() if plan.settings.gateways else spark_paths(plan.settings))


def _spark_wanted(plan: HostPlan) -> dict[str, Want]:
    """Behind the fleet's gateways (none without a gateway group): the agent's directory and spark_files."""
    behind = spark_files(plan.settings)
    if not behind:
        return {}
    return {plan.paths.agent_dir: Want("dir"), **{path: Want("file", "644", sha256=sha256(content))
                                                  for path, content in behind.items()}}


SPARK: StatusPart[None] = register(StatusPart("gateway", reads=_spark_reads, wanted=_spark_wanted))
