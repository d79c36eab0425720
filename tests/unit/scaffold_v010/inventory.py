"""pyinfra inventory of a specfleet fleet project: the Ansible-format fleet file named by
SPECFLEET_INVENTORY (default: inventory/fleet.yml next to this file).

Every host is validated (packaged defaults < group_data/all.py < profile < fleet file vars) and, for a
deploy, its models pinned on the controller, before pyinfra connects to anything; problems are printed
one per line and the run stops with exit code 2.
"""

from specfleet.plan import pyinfra_groups

globals().update(pyinfra_groups(project=__file__))
