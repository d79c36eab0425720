# `import hostlib` in a host program (installed side by side on a host), typed as its packaged module
from specfleet.host.hostlib import *  # noqa: F403 - every name the module has
