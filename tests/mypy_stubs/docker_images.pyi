# `import docker_images` in a host program (installed side by side on a host), typed as its packaged module
from specfleet.host.docker_images import *  # noqa: F403 - every name the module has
