"""Pick, for each load point of a GuideLLM report, the /metrics scrapes just before it
started and just after it ended (scrape.py names them by unix time in ms).

Prints one "BEFORE AFTER" pair per benchmark, in the report's order, ready for
``bayesspec ingest REPORT --metrics BEFORE AFTER ...``. Usage:
python pair_scrapes.py REPORT.json SCRAPE_DIR
"""

import json
import sys
from pathlib import Path


def main(report: str, folder: str) -> None:
    doc = json.loads(Path(report).read_text())
    scrapes = sorted((int(p.stem), p) for p in Path(folder).glob("*.prom"))
    if len(scrapes) < 2:
        sys.exit(f"{folder}: fewer than two scrapes")
    for i, bench in enumerate(doc["benchmarks"]):
        start_ms, end_ms = 1000 * bench["start_time"], 1000 * bench["end_time"]
        before = [p for t, p in scrapes if t <= start_ms]
        after = [p for t, p in scrapes if t >= end_ms]
        if not before or not after:
            sys.exit(f"{report}: benchmark {i} is not bracketed by scrapes in {folder}")
        print(before[-1], after[0])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
