"""`python -m specfleet_lab` is the `specfleet-lab` command."""

from specfleet_lab.cli import main

if __name__ == "__main__":
    main()
