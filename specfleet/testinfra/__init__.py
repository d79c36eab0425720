"""specfleet's testinfra suite, shipped in the package so every fleet project runs the same checks.

A project's tests/infra/ is a thin entry point (written by `specfleet init`; the repository's is the
same): conftest.py imports the fixtures, test_converged.py / test_real_gpu.py import the checks.

    SPECFLEET_INVENTORY=inventory/fleet.yml pytest tests/infra

The fleet file is SPECFLEET_INVENTORY, else inventory/fleet.yml in the current directory (the project).
"""
