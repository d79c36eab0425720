"""Platform constants: facts about the tools specfleet drives, not tunables (those are in defaults.py)."""

GB = 1_000_000_000  # decimal gigabyte, as `df` and the Hub report sizes
#: How long apt waits for the dpkg lock (held e.g. by unattended-upgrades after boot) before failing with
#: "Could not get lock /var/lib/dpkg/lock-frontend. It is held by process N (unattended-upgr)".
DPKG_LOCK_TIMEOUT_SEC = 600
EXIT_INVALID = 2  # exit status of a command refused for bad input (one `HOST: KEY: ...` line per problem)
#: Exit status of a read-only command (plan, releases) when a host's status could not be read: what it prints is
#: then not the whole fleet.
EXIT_UNREACHABLE = 1
DEFAULT_INVENTORY = "inventory/fleet.yml"  # the fleet file of a project, unless SPECFLEET_INVENTORY names one
