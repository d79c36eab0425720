#!/bin/bash
# trtllm-llmapi-launch STAND-IN -- this is NOT TensorRT-LLM (specfleet CI, no GPU). Installed in the stand-in image as
# /usr/local/bin/trtllm-llmapi-launch. It does what TensorRT-LLM's own launcher does (tensorrt_llm/llmapi/
# trtllm-llmapi-launch, read at NVIDIA/TensorRT-LLM 020c89e), run as `mpirun ... trtllm-llmapi-launch trtllm-serve ...`:
# - every rank: TLLM_SPAWN_PROXY_PROCESS=1, tllm_mpi_size = the MPI world's size, and an address on 127.0.0.1 (from
#   port 10012 up) where rank 0's MPI session serves the LLM API process;
# - rank 0: runs the command (trtllm-serve) in the background with the MPI environment removed, and in the foreground
#   tensorrt_llm.llmapi.mgmn_leader_node, which holds the MPI world; when the command ends well, it stops the leader.
#   When the command fails, `set -e` ends the subshell first: no stop is sent, and the world stays up serving
#   nothing until it is stopped from outside (upstream's behaviour, kept: the deployment must not wait on mpirun);
# - `set -x`, as upstream: every command goes to stderr, the HMAC key's assignment included (in upstream's too);
# - other ranks: tensorrt_llm.llmapi.mgmn_worker_node.
# The stand-in modules are pylib/tensorrt_llm/llmapi/mgmn_{leader,worker}_node.py (mpi4py, Debian's python3-mpi4py).
set -ex

task=("$@")
mpi_rank=${SLURM_PROCID:-${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMI_ID:-0}}}}
log() { echo "trtllm-llmapi-launch STAND-IN: $*" >&2; }
log "mpi_rank: $mpi_rank"

export TLLM_SPAWN_PROXY_PROCESS=1
export tllm_mpi_size=${SLURM_NTASKS:-${OMPI_COMM_WORLD_SIZE:-1}}
log "tllm_mpi_size: $tllm_mpi_size"
port=$(python3 -c 'import socket
s = socket.socket(); port = 10012
while True:
    try:
        s.bind(("", port)); break
    except OSError:
        port += 1
print(port); s.close()')
export TLLM_SPAWN_PROXY_PROCESS_IPC_ADDR="tcp://127.0.0.1:${port}"
TLLM_SPAWN_PROXY_PROCESS_IPC_HMAC_KEY=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
export TLLM_SPAWN_PROXY_PROCESS_IPC_HMAC_KEY

if [ "$mpi_rank" -eq 0 ]; then
    log "rank0 run ${task[*]} in background"
    (
        for var in $(compgen -e); do
            case "$var" in
                OMPI_*|PMIX_*|PMI_*|SLURM_*|MPI_*|UCX_*|I_MPI_*|HYDRA_*|KMP_*|MPICH_*|MV2_*|CRAY_*) unset "$var" ;;
            esac
        done
        "${task[@]}"
        python3 -m tensorrt_llm.llmapi.mgmn_leader_node --action stop
    ) &
    log "rank0 run mgmn leader node with mpi_world_size: $tllm_mpi_size ..."
    python3 -m tensorrt_llm.llmapi.mgmn_leader_node
else
    log "rank${mpi_rank} run mgmn worker node with mpi_world_size: $tllm_mpi_size ..."
    python3 -m tensorrt_llm.llmapi.mgmn_worker_node
fi
