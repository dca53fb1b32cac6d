"""End to end: a page reaches a person, and the dashboard shows live data.

Issue 12, parts 2 and 3, on one cluster: trainsupd with real torchrun jobs, a
real Prometheus scraping it every second with the repo's rules
(deploy/prometheus/trainsup-rules.yml), a real Alertmanager (Debian's
prometheus-alertmanager) loaded with the shipped example configuration
(deploy/alertmanager/alertmanager.yml, only its receiver URLs and timings
replaced), and a webhook receiver in this process.

- A hang pages: TrainingStepStalled reaches the page receiver naming the job
  and the suspected rank and node; the time from the last step to delivery is
  printed.
- A job past its restart limit pages: TrainingRestartsHeld.
- Every `trainsupctl ...` command the rules' annotations tell the on-call
  person to run exists: each runs against the live trainsupd and exits 0.
- Every query of deploy/grafana/trainsup-dashboard.json parses and returns
  data from the live Prometheus.
Measured figures are printed as "measured: ...".
"""

import http.server
import json
import os
import re
import shlex
import sys
import threading
import time
import unittest

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import REPO, Cluster, has_failed, train_steps, wait_for  # noqa: E402
from test_detection import parse_time  # noqa: E402

STARTUP = 90
RULES = os.path.join(REPO, "deploy", "prometheus", "trainsup-rules.yml")
ALERTMANAGER_EXAMPLE = os.path.join(REPO, "deploy", "alertmanager", "alertmanager.yml")
DASHBOARD = os.path.join(REPO, "deploy", "grafana", "trainsup-dashboard.json")
METRICS_DOC = os.path.join(REPO, "docs", "metrics.md")

# Short detection and recovery, so that the test is short. A restart limit of
# 1: the second failure of a job holds it. The restart backoff keeps a stalled
# job stalled (trainsup_job_stalled holds until the next generation) for a
# few scrape and evaluation rounds, long enough for the page to leave
# Prometheus; a real backoff is longer still. Quarantine is out of the way:
# the flaky job must be held, not lose its node.
SUPERVISOR = ["--stall-floor", "3s", "--stall-factor", "10", "--sweep-interval", "250ms",
              "--restart-limit", "1", "--restart-window", "10m", "--restart-backoff", "5s",
              "--stop-grace", "5s", "--quarantine-after", "1000"]


# The file's three jobs, 2 nodes x 1 rank each. They start together in
# setUpClass, so that their startups (and the flaky job's restart backoff)
# overlap; each test waits for its own job's outcome.
HANG, FLAKY, HEALTHY = "e2e-alert-hang", "e2e-alert-flaky", "e2e-alert-healthy"


def start_jobs(c):
    # Rank 1 is node-b's only rank; generation 2 (after trainsupd's restart)
    # runs clean.
    c.start_job(HANG, nproc_per_node=1, train_args=[
        "--steps", "400", "--step-seconds", "0.04", "--hang-rank", "1", "--hang-step", "40",
        "--hang-generation", "1"])
    # A native crash on node-d at every generation: restarted once (the
    # limit), then held.
    c.start_job(FLAKY, nproc_per_node=1, first_node=2, train_args=[
        "--steps", "1000", "--step-seconds", "0.04", "--crash-rank", "1", "--crash-step", "5",
        "--crash-mode", "sigsegv"])
    # Clean, stepping until the end of the file (node-e, node-f).
    c.start_job(HEALTHY, nproc_per_node=1, first_node=4, train_args=[
        "--steps", "100000", "--step-seconds", "0.05"])


class Webhook:
    """An HTTP server in a thread that records what Alertmanager posts to it:
    [(receive time, payload)]."""

    def __init__(self):
        self.received = []
        self._lock = threading.Lock()
        webhook = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with webhook._lock:
                    webhook.received.append((time.time(), json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/alerts"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def firing(self, alertname, job_id):
        """The first firing notification of `alertname` about `job_id`, as
        (receive time, payload, the alert), or None."""
        with self._lock:
            received = list(self.received)
        for at, payload in received:
            for alert in payload["alerts"]:
                labels = alert["labels"]
                if (alert["status"] == "firing" and labels.get("alertname") == alertname
                        and labels.get("job_id") == job_id):
                    return at, payload, alert
        return None

    def close(self):
        self._server.shutdown()
        self._server.server_close()


def alertmanager_config(webhook_url):
    """The shipped example with only what a test must change: every receiver
    URL points at the test's webhook, and the group timings are 1s instead of
    the production 30s / 5m."""
    with open(ALERTMANAGER_EXAMPLE) as f:
        text = f.read()
    replacements = [(r"(?m)^(\s*- url: ).*$", r"\g<1>" + webhook_url, 3),
                    (r"(?m)^(\s*group_wait: ).*$", r"\g<1>1s", 1),
                    (r"(?m)^(\s*group_interval: ).*$", r"\g<1>1s", 1)]
    for pattern, replacement, expected in replacements:
        text, count = re.subn(pattern, replacement, text)
        if count != expected:
            raise AssertionError(f"{ALERTMANAGER_EXAMPLE}: {pattern} matched {count} times, "
                                 f"expected {expected}: update the test with the example")
    return text


def annotation_commands(alertname=None):
    """{alertname: [trainsupctl command templates]} from the rules' annotations
    (every `trainsupctl ...` in backquotes), of one alert if given."""
    with open(RULES) as f:
        groups = yaml.safe_load(f)["groups"]
    out = {}
    for group in groups:
        for rule in group["rules"]:
            if alertname is not None and rule["alert"] != alertname:
                continue
            text = " ".join(rule.get("annotations", {}).values())
            out[rule["alert"]] = re.findall(r"`(trainsupctl [^`]*)`", text)
    return out


def render(template, labels):
    """A command template with its {{ $labels.X }} filled in."""
    def label(match):
        if match.group(1) not in labels:
            raise AssertionError(f"{template!r}: no label {match.group(1)} to substitute")
        return labels[match.group(1)]
    text = re.sub(r"\{\{\s*\$labels\.(\w+)\s*\}\}", label, template)
    if "{{" in text:
        raise AssertionError(f"{template!r}: a template the test cannot fill in")
    return text


class AlertsEndToEnd(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.webhook = Webhook()
        cls.cluster = c = Cluster(supervisor_args=SUPERVISOR)
        try:
            c.start_supervisor()
            config = os.path.join(c.workdir, "alertmanager.yml")
            with open(config, "w") as f:
                f.write(alertmanager_config(cls.webhook.url))
            c.start_alertmanager(config)
            c.start_prometheus(interval="1s", alertmanager=c.alertmanager_address)
            start_jobs(c)
        except BaseException:
            print(c.diagnostics(), file=sys.stderr)
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()
        cls.webhook.close()

    def tearDown(self):
        if has_failed(self):
            print(self.cluster.diagnostics(), file=sys.stderr)
            print(f"--- webhook received ---\n{self.webhook.received}", file=sys.stderr)

    def run_annotation_commands(self, alertname, labels):
        """Runs every trainsupctl command of `alertname`'s annotations with
        `labels` filled in; each must exit 0. Returns {command: stdout}."""
        commands = annotation_commands(alertname)[alertname]
        outputs = {}
        for template in commands:
            argv = shlex.split(render(template, labels))
            code, out, err = self.cluster.ctl(*argv[1:], check=False)
            self.assertEqual(code, 0, f"{alertname}'s annotation says to run "
                                      f"`{' '.join(argv)}`, which exits {code}: {err}")
            outputs[" ".join(argv)] = out
        return outputs

    def test_a_hang_pages_naming_the_job_and_the_suspected_rank_and_node(self):
        c, job = self.cluster, HANG
        at, payload, alert = wait_for(lambda: self.webhook.firing("TrainingStepStalled", job),
                                      STARTUP + 60, what="TrainingStepStalled at the webhook")
        self.assertEqual(payload["receiver"], "trainsup-page")
        self.assertEqual(payload["groupLabels"], {"job_id": job})
        labels, annotations = alert["labels"], alert["annotations"]
        self.assertEqual((labels["job_id"], labels["rank"], labels["node"], labels["severity"]),
                         (job, "1", "node-b", "page"), labels)
        self.assertIn("suspect rank 1 on node-b", annotations["summary"])
        self.assertIn(f"`trainsupctl stacks {job}`", annotations["description"])

        stall = c.events(job, "stall")[0]
        self.assertEqual((stall["rank"], stall["node"]), (1, "node-b"))
        last_step = max(s["time"] for s in train_steps(c.train_log)
                        if s["node"] in ("node-a", "node-b") and s["generation"] == 1)
        print(f"\nmeasured: TrainingStepStalled delivered to the webhook {at - last_step:.1f}s "
              f"after the last step (stall threshold "
              f"{stall['figures']['threshold_seconds']:.1f}s; scrape and evaluation every 1s; "
              f"Alertmanager group_wait 1s)", file=sys.stderr)
        # The threshold, a sweep, a scrape, an evaluation, group_wait: seconds.
        self.assertLess(at - last_step, stall["figures"]["threshold_seconds"] + 10)

        outputs = self.run_annotation_commands("TrainingStepStalled", labels)
        # The stacks were taken before the stop, the culprit's marked.
        self.assertRegex(outputs[f"trainsupctl stacks {job}"],
                         r"rank: 1 \(node-b\)\s+<- holds the culprit")

    def test_a_job_past_its_restart_limit_pages(self):
        c, job = self.cluster, FLAKY
        at, payload, alert = wait_for(lambda: self.webhook.firing("TrainingRestartsHeld", job),
                                      STARTUP * 2 + 60, what="TrainingRestartsHeld at the webhook")
        hold = c.events(job, "hold")[0]
        self.assertEqual(payload["receiver"], "trainsup-page")
        self.assertEqual((alert["labels"]["job_id"], alert["labels"]["severity"]), (job, "page"))
        self.assertIn(f"`trainsupctl resume {job}`", alert["annotations"]["description"])
        self.assertEqual(len(c.events(job, "restart")), 1)
        print(f"\nmeasured: TrainingRestartsHeld delivered to the webhook "
              f"{at - parse_time(hold['time']):.1f}s after trainsupd held the job",
              file=sys.stderr)

        # `resume` last: it lifts the hold the others look at.
        outputs = self.run_annotation_commands("TrainingRestartsHeld", alert["labels"])
        self.assertIn("resumed", outputs[f"trainsupctl resume {job}"])

    def healthy_job(self):
        """The clean job, once it has stepped."""
        wait_for(lambda: (self.cluster.metric("trainsup_job_step", job_id=HEALTHY) or -1) > 0,
                 STARTUP, what=f"{HEALTHY}'s first step")
        return HEALTHY

    def test_every_annotation_command_exists(self):
        """The commands of the alerts the other tests do not raise, run
        against a live job (the others run in their own alert's test)."""
        job = self.healthy_job()
        commands = annotation_commands()
        self.assertTrue(commands["TrainingStepStalled"] and commands["TrainingRestartsHeld"])
        checked = 0
        for alertname, templates in commands.items():
            if alertname in ("TrainingStepStalled", "TrainingRestartsHeld"):
                continue
            self.run_annotation_commands(alertname, {"job_id": job, "node": "node-e"})
            checked += len(templates)
        total = sum(len(t) for t in commands.values())
        print(f"\nmeasured: {total} trainsupctl commands in the rules' annotations, "
              f"{checked} run here (the rest in their alert's test)", file=sys.stderr)

    def test_every_dashboard_query_returns_data(self):
        c = self.cluster
        with open(DASHBOARD) as f:
            dashboard = json.load(f)
        check_dashboard_structure(self, dashboard)
        exprs = dashboard_exprs(dashboard)
        self.assertGreater(len(exprs), 10)
        with open(METRICS_DOC) as f:
            documented = set(re.findall(r"`(trainsup_\w+)`", f.read()))
        for expr in exprs:
            for name in re.findall(r"\btrainsup_\w+", expr):
                self.assertIn(name, documented, f"{name} (in {expr!r}) is not in docs/metrics.md")

        job = self.healthy_job()
        # A few scrapes of the job's step times, for rate() over the window.
        wait_for(lambda: c.prometheus_query(
            f'count_over_time(trainsup_job_step_duration_seconds{{job_id="{job}",'
            f'percentile="p50"}}[10s]) >= 5')["result"], STARTUP,
            what="Prometheus to hold 5 scrapes of the job's step times")

        # The values Grafana would substitute: the job picked, or "All"
        # (the variable's allValue); intervals as for a 1s scrape.
        all_value = next(v for v in dashboard["templating"]["list"]
                         if v["name"] == "job_id")["allValue"]
        queries = [substitute(expr, job_id) for expr in exprs for job_id in (job, all_value)]

        # Each parses (prometheus_query raises on an error) and returns data.
        empty = []

        def all_return_data():
            empty[:] = [q for q in queries if not c.prometheus_query(q)["result"]]
            return not empty

        try:
            # A rate needs two scrapes in its window; the job just started.
            wait_for(all_return_data, 30, interval=1, what="every dashboard query to return data")
        except TimeoutError:
            self.fail("dashboard queries with no data:\n" + "\n".join(empty))
        print(f"\nmeasured: {len(exprs)} dashboard queries ({len(queries)} with the job and "
              f"with All) parse and return data from the live Prometheus", file=sys.stderr)


def dashboard_panels(panels):
    """Every panel, rows' nested (collapsed) panels included."""
    for panel in panels:
        yield panel
        yield from dashboard_panels(panel.get("panels", []))


def dashboard_exprs(dashboard):
    return [t["expr"] for p in dashboard_panels(dashboard["panels"])
            for t in p.get("targets", [])]


def substitute(expr, job_id):
    """What Grafana sends for `expr` with `job_id` picked, on a 1s scrape."""
    # A picked value is escaped as Grafana escapes it for a regex matcher
    # inside a PromQL string (a backslash, itself escaped); "All" is not.
    if job_id != ".+":
        job_id = re.sub(r"[$^*{}\[\]'+?.()|\\]", lambda m: "\\\\" + m.group(0), job_id)
    for variable, value in [("job_id", job_id),
                            ("__rate_interval", "5s"), ("__interval", "2s"),
                            ("__range", "1m")]:
        expr = expr.replace("${" + variable + "}", value)
        expr = re.sub(r"\$" + variable + r"\b", lambda _: value, expr)
    if "$" in expr:
        raise AssertionError(f"a variable left in {expr!r}")
    return expr


def check_dashboard_structure(test, dashboard):
    """A Grafana 10 dashboard model whose panels all query the Prometheus
    picked by its datasource variable, filtered by its job_id variable."""
    test.assertEqual(dashboard["schemaVersion"], 38)
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    datasource = variables["datasource"]
    test.assertEqual((datasource["type"], datasource["query"]), ("datasource", "prometheus"))
    job_id = variables["job_id"]
    test.assertEqual(job_id["type"], "query")
    test.assertRegex(job_id["definition"], r"^label_values\(trainsup_\w+, job_id\)$")
    test.assertTrue(job_id["multi"] and job_id["includeAll"])
    test.assertEqual(job_id["datasource"]["uid"], "${datasource}")
    panels = [p for p in dashboard_panels(dashboard["panels"]) if p["type"] != "row"]
    test.assertTrue(panels)
    for panel in panels:
        where = f"panel {panel['title']!r}"
        test.assertEqual(panel["datasource"], {"type": "prometheus", "uid": "${datasource}"}, where)
        test.assertTrue(panel.get("description"), f"{where} has no description")
        test.assertTrue(panel["targets"], f"{where} has no query")
        for target in panel["targets"]:
            test.assertEqual(target["datasource"]["uid"], "${datasource}", where)
            # A job-level query must follow the job picked.
            if "job_id" in target["expr"]:
                test.assertIn('job_id=~"$job_id"', target["expr"], where)


if __name__ == "__main__":
    unittest.main(verbosity=2)
