"""Try specfleet locally: 2 lab hosts (containers, or QEMU guests with `--qemu`) stand in for DGX Sparks, the
stand-ins for the Hub and for trtllm-serve stand in for what cannot run here, and the controller serves the hosts
the deploy's Python packages (a wheelhouse: the hosts have no way out). Runs the real
`pyinfra inventory.py deploys/eagle3.py` on the fleet that try.sh brought up with `specfleet-lab up --count 2`.

    bash tests/vm/try.sh          # then, when done:  specfleet-lab down
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import specfleet_lab
from specfleet_lab import OPERATOR
from tests.vm import lab
from tests.vm import wheelhouse as wheelhouse_mod
from tests.vm.hub_standin import STANDIN_TOKEN, HubStandin


def main() -> int:
    workdir = Path(os.environ.get("SPECFLEET_VM_DIR", lab.ROOT / ".vm"))
    cache = Path(os.environ.get("SPECFLEET_CACHE_DIR") or Path.home() / ".cache" / "specfleet")
    fleet = specfleet_lab.load(workdir)  # brought up by try.sh: specfleet-lab up --count 2
    print(f"==> the fleet in {workdir} ({fleet.driver.name}): {', '.join(g.name for g in fleet.guests)}")
    print("==> loading the trtllm-serve STAND-IN image into the hosts (no GPU here)")
    n_cas = lab.trust_controller_cas(fleet)
    lab.load_standin_image(fleet, cache)
    house = wheelhouse_mod.prepare(cache, say=print)
    wheels = None if house is None else wheelhouse_mod.WheelhouseServer(
        list(house.dirs.values()), bind=fleet.driver.bind_address, port=0, arches=house.arches).start()
    lab.configure_guest_pip(fleet, wheels.index_url_for(fleet.controller_address) if wheels else None, cert=n_cas > 0)
    with HubStandin(bind=fleet.driver.bind_address, port=0) as hub:
        inventory = lab.write_ci_inventory(fleet, hub.port, workdir / "ci-inventory.yml")
        print(f"==> SPECFLEET_INVENTORY={inventory} pyinfra -y inventory.py deploys/eagle3.py")
        env = {**os.environ, "SPECFLEET_INVENTORY": str(inventory), "HF_TOKEN": STANDIN_TOKEN}
        rc = subprocess.call([sys.executable, "-m", "pyinfra", "-y", "inventory.py", "deploys/eagle3.py"],
                             cwd=lab.ROOT, env=env)
    if wheels:
        wheels.stop()
    if rc != 0:
        print(f"pyinfra failed (exit {rc}); the fleet is still up for a look. "
              f"Tear down: specfleet-lab down --workdir {workdir}")
        return rc
    guest = fleet.guests[0]
    answer = lab.guest_curl_completion(guest, prompt="Explain speculative decoding in one sentence.")
    print(f"==> completion from {guest.name} (trtllm-serve stand-in):")
    print(json.dumps(answer, indent=1))
    print(f"\nRe-run the converge (nothing changes):  SPECFLEET_INVENTORY={inventory} HF_TOKEN={STANDIN_TOKEN} "
          "pyinfra -y inventory.py deploys/eagle3.py")
    print(f"Log in:     {guest.login_command()}   (the operator {OPERATOR}, as on DGX OS; `sudo -i` for root)")
    print(f"Tear down:  specfleet-lab down --workdir {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
