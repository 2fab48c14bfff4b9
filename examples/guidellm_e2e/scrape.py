"""Scrape a /metrics URL every INTERVAL seconds into DIR/<unix time in ms>.prom.

The end-to-end run pairs these with GuideLLM's load points afterwards (pair_scrapes.py):
GuideLLM runs a whole sweep in one process, so the scrapes just before a point starts
and just after it ends are picked by time. Stops on SIGTERM or after 10 failed scrapes
in a row. Usage: python scrape.py URL DIR [INTERVAL]
"""

import os
import signal
import sys
import time
import urllib.request
from pathlib import Path

stop = False


def _stop(*_):
    global stop
    stop = True


def main(url: str, folder: str, interval: float = 0.5) -> None:
    signal.signal(signal.SIGTERM, _stop)
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    failures = 0
    while not stop and failures < 10:
        started = time.time()
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                body = response.read()
            failures = 0
        except OSError:
            failures += 1
            time.sleep(interval)
            continue
        # Stamp with the midpoint of the request: the counters were read about then.
        stamp = int(round(500 * (started + time.time())))
        tmp = out / f".{stamp}.tmp"
        tmp.write_bytes(body)
        os.replace(tmp, out / f"{stamp}.prom")
        time.sleep(max(0.0, interval - (time.time() - started)))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 0.5)
