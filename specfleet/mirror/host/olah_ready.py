"""Wait until a loopback service answers HTTP (a Type=exec unit that dies after starting is not caught by
systemctl): olah, and the image registry. Run on the mirror host with a Python (olah's virtualenv's, or python3),
shipped as `<python> -c <this file's text> URL` (mirror/steps/ready.py). Exits 0 on any HTTP answer, 1 when
none came in ATTEMPTS tries a second apart. Stdlib only.
"""

import sys
import time
import urllib.error
import urllib.request

ATTEMPTS = 300  # olah imports fastapi, pydantic and huggingface_hub: slow on a small or emulated host


def answers(url, timeout=5):
    """True when anything answers HTTP at url (an error status too: olah is up)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def main(argv, attempts=ATTEMPTS, sleep=time.sleep):
    for _ in range(attempts):
        if answers(argv[1]):
            return 0
        sleep(1)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
