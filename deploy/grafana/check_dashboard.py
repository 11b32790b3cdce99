#!/usr/bin/env python3
"""check_dashboard.py DASHBOARD.json METRICS_SOURCE.cc

Checks a Grafana dashboard against the metrics fedgather-server serves: the
file is JSON with panels, and every fedgather_* series a panel queries (the
histogram suffixes _bucket, _count and _sum stripped) is a metric name that
server/observe/server_metrics.cc registers. Exit 1 naming each unknown series."""
import json
import re
import sys


def main() -> int:
    dashboard_path, source_path = sys.argv[1], sys.argv[2]
    with open(dashboard_path) as f:
        dashboard = json.load(f)
    with open(source_path) as f:
        served = set(re.findall(r'"(fedgather_[a-z_]+)"', f.read()))
    panels = dashboard.get("panels", [])
    if not panels:
        print(f"{dashboard_path}: no panels")
        return 1
    unknown = []
    for panel in panels:
        for target in panel.get("targets", []):
            for name in re.findall(r"fedgather_[a-z_]+", target.get("expr", "")):
                base = re.sub(r"_(bucket|count|sum)$", "", name)
                if base not in served:
                    unknown.append(f"panel '{panel.get('title')}': {name}")
    for line in unknown:
        print(f"{dashboard_path}: unknown series {line}")
    return 1 if unknown else 0


if __name__ == "__main__":
    sys.exit(main())
