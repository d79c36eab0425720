# `import release_stage` in a host program (installed side by side on a host), typed as its packaged module
from specfleet.serving.host.release_stage import *  # noqa: F403 - every name the module has
