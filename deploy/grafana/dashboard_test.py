"""traind.json is what make_dashboard.py writes (never edited by hand), and a dashboard Grafana imports: unique
panel ids and titles, a Prometheus target with an expression in every panel, panels that do not overlap, the panels
the monitoring guide names."""

import json
import os
import runpy
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


class DashboardTest(unittest.TestCase):
    def setUp(self):
        with open(os.path.join(HERE, "traind.json")) as file:
            self.dashboard = json.load(file)

    def test_the_committed_json_is_the_generators_output(self):
        generated = runpy.run_path(os.path.join(HERE, "make_dashboard.py"))["DASHBOARD"]
        self.assertEqual(json.loads(json.dumps(generated)), self.dashboard,
                         "run /usr/bin/python3 deploy/grafana/make_dashboard.py and commit traind.json")

    def test_panels(self):
        panels = self.dashboard["panels"]
        self.assertEqual(len({p["id"] for p in panels}), len(panels))
        titles = {p["title"] for p in panels}
        self.assertEqual(len(titles), len(panels))
        for wanted in ("Training steps / s", "Examples / s", "Step latency", "Sessions", "Jobs by state",
                       "Non-finite steps (skipped)", "RPC errors", "Checkpoint saves", "CPU", "Memory"):
            self.assertIn(wanted, titles)
        cells = set()
        for p in panels:
            self.assertTrue(p["targets"], p["title"])
            for target in p["targets"]:
                self.assertTrue(target["expr"].strip(), p["title"])
                self.assertEqual(target["datasource"]["type"], "prometheus")
            grid = p["gridPos"]
            self.assertLessEqual(grid["x"] + grid["w"], 24, p["title"])
            for x in range(grid["x"], grid["x"] + grid["w"]):
                for y in range(grid["y"], grid["y"] + grid["h"]):
                    self.assertNotIn((x, y), cells, f"{p['title']} overlaps another panel")
                    cells.add((x, y))


if __name__ == "__main__":
    unittest.main()
