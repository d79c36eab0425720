# `import host_jobs` in a host program (installed side by side on a host), typed as its packaged module
from specfleet.host.host_jobs import *  # noqa: F403 - every name the module has
