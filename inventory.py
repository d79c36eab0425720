"""pyinfra inventory for specfleet: the Ansible-format fleet file named by SPECFLEET_INVENTORY
(default inventory/fleet.yml; see inventory/example.yml).

Every host is validated (and, for a deploy, its models pinned on the controller) before pyinfra
connects to anything; problems are printed one per line and the run stops with exit code 2.
"""

from specfleet.plan import pyinfra_groups

globals().update(pyinfra_groups())
