# `import pair_switch` in a host program (installed side by side on a host), typed as its packaged module
from specfleet.pair.host.pair_switch import *  # noqa: F403 - every name the module has
