#!/bin/sh
# pair-agent: mpirun's rsh agent (plm_rsh_agent) in the head's serving container. mpirun runs it as
# `pair-agent HOST orted ...`; it reaches the worker's host sshd with the pair's MPI key, the worker's host key
# pinned (StrictHostKeyChecking=yes against the pair's own known_hosts, no global file, no user config), as the
# pair's MPI login, and the worker's pair gate decides what runs (host/pair_gate.py). Its key and known_hosts are
# the files next to it (<data_dir>/pair, mounted read-only); the login and port come from the launch's environment
# (SPECFLEET_PAIR_USER, SPECFLEET_PAIR_PORT), rendered from the worker's settings. The head's switch job
# (host/pair_switch.py) runs it on the host with SPECFLEET_PAIR_KEY, its switch key, which no container sees.
set -eu
dir=$(dirname "$0")
host=$1
shift
exec ssh -F /dev/null -i "${SPECFLEET_PAIR_KEY:-$dir/mpi_key}" -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=yes \
    -o UserKnownHostsFile="$dir/known_hosts" -o GlobalKnownHostsFile=/dev/null -o ConnectTimeout=10 \
    -p "${SPECFLEET_PAIR_PORT:?the worker's SSH port}" -l "${SPECFLEET_PAIR_USER:?the pair's MPI login}" \
    "$host" "$@"
