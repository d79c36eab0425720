"""THE pair's MPI launch on the head (pure): the `mpirun` command line its container runs, from the head's settings.
The worker's pair gate (pair/host/pair_gate.py) lets through the daemon launch this produces and nothing else;
tests/unit/test_pair_launch.py runs this line under Debian's real OpenMPI and hands the line it asks the worker to
run to the gate. The head's unit runs it (render.container_command).

From NVIDIA's "Run on Two Sparks" (`mpirun ... trtllm-llmapi-launch trtllm-serve ... --tp_size 2`), with:
- one rank per node at the link addresses (`-H head:1,worker:1`, the nccl playbook's form), the head's first;
- MPI's own traffic on the link subnets only (btl/oob_tcp_if_include take CIDR subnets, which both hosts share;
  interface names may differ between the two ends); operators report MPI taking the management network otherwise;
- the pair's rsh agent (pair/host/pair_agent.sh) without tree spawn, the playbook's OMPI_MCA_plm_rsh_no_tree_spawn=1;
- no `-x HF_TOKEN`: models are on both nodes before the launch and the container runs with HF_HUB_OFFLINE=1; the
  worker's ranks inherit its own container's environment through `docker exec`;
- each rank's launcher with bash's trace sent to /dev/null (RANK_COMMAND): upstream's launcher runs `set -x`, which
  prints the session's IPC HMAC key to stderr, i.e. into the head unit's journal. BASH_XTRACEFD names the trace's
  file descriptor (bash(1)); the launcher's own output and trtllm-serve's are unchanged."""

from __future__ import annotations

from ..fleet.settings import Settings
from ..host.layout import PAIR_AGENT
from .render import link_ip

LAUNCHER = "trtllm-llmapi-launch"  # TensorRT-LLM's per-rank launcher (tensorrt_llm/llmapi/trtllm-llmapi-launch)
# what mpirun runs on each rank: the launcher (a bash script) with its `set -x` trace on fd 7, which is /dev/null
RANK_COMMAND = ["bash", "-c", 'exec 7>/dev/null; export BASH_XTRACEFD=7; exec "$0" "$@"', LAUNCHER]


def mpirun_argv(s: Settings, serve: list[str]) -> list[str]:
    """The head's launch: `mpirun ... trtllm-llmapi-launch trtllm-serve SERVE...` (SERVE: render.serve_args)."""
    assert s.pair_role == "head" and s.pair_link_addresses and s.pair_peer_link_addresses
    subnets = ",".join(s.pair_link_subnets)
    return ["mpirun", "--allow-run-as-root", "-np", "2",
            "-H", f"{link_ip(s.pair_link_addresses[0])}:1,{link_ip(s.pair_peer_link_addresses[0])}:1",
            "--mca", "plm_rsh_agent", PAIR_AGENT, "--mca", "plm_rsh_no_tree_spawn", "1",
            "--mca", "btl_tcp_if_include", subnets, "--mca", "oob_tcp_if_include", subnets,
            *RANK_COMMAND, "trtllm-serve", *serve]
