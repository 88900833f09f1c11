"""monitoring/: the alert rules and the Grafana dashboard name only what a
real lockbrokerd exports at /metrics, and the rules pass promtool's checks
and their own unit tests (monitoring/lockbroker.rules.test.yml)."""

import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest
import urllib.error
import urllib.parse
import urllib.request

from lbtest import BrokerTest, free_port, main, wait_until

MONITORING = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          "..", "..", "monitoring")
RULES = os.path.join(MONITORING, "lockbroker.rules.yml")
RULES_TEST = os.path.join(MONITORING, "lockbroker.rules.test.yml")
DASHBOARD = os.path.join(MONITORING, "lockbroker-dashboard.json")
PROMTOOL = os.environ.get("PROMTOOL") or shutil.which("promtool")

# Series Prometheus makes itself for every target; nothing else may be
# named that the daemon does not export.
SCRAPE_SERIES = {"up"}
# Labels Prometheus attaches to every scraped series.
TARGET_LABELS = {"job", "instance"}

# PromQL functions and aggregations (an identifier before "(").
FUNCTIONS = set("""
abs absent absent_over_time acos acosh asin asinh atan atanh avg
avg_over_time bottomk ceil changes clamp clamp_max clamp_min count
count_over_time count_values cos cosh day_of_month day_of_week day_of_year
days_in_month deg delta deriv exp floor group histogram_count
histogram_fraction histogram_quantile histogram_stddev histogram_stdvar
histogram_sum holt_winters hour idelta increase irate label_join
label_replace last_over_time ln log10 log2 mad_over_time max max_over_time
min min_over_time minute month pi predict_linear present_over_time quantile
quantile_over_time rad rate resets round scalar sgn sin sinh sort sort_desc
sqrt start end stddev stddev_over_time stdvar stdvar_over_time sum
sum_over_time tan tanh time timestamp topk vector year
""".split())
# Words that are not metric names where no "(" follows.
KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on",
            "ignoring", "group_left", "group_right", "inf", "nan", "atan2"}

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
VARIABLE = re.compile(r'\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*')
TOKEN = re.compile(r'(?P<num>0x[0-9a-fA-F]+|[0-9]+(?:\.[0-9]*)?'
                   r'(?:[eE][+-]?[0-9]+)?[a-zA-Z]*)'
                   r'|(?P<id>[a-zA-Z_:][a-zA-Z0-9_:]*)(?P<call>\s*\()?')
SELECTOR = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}')
MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*'
                     r'"((?:[^"\\]|\\.)*)"')


def grafana_query(expr):
    """A Grafana variable query as PromQL: label_values(sel, label) is
    sel; label_values(label) names no metric."""
    expr = re.sub(r'^\s*label_values\(\s*(.*?)\s*,\s*[a-zA-Z_]\w*\s*\)\s*$',
                  r'\1', expr, flags=re.S)
    return re.sub(r'^\s*label_values\(\s*[a-zA-Z_]\w*\s*\)\s*$', '', expr)


def metric_names(expr):
    """The metric names a PromQL expression selects: identifiers that are
    not functions, keywords, label names, durations or Grafana variables."""
    s = STRING.sub('""', expr)
    s = re.sub(r'#[^\n]*', ' ', s)
    s = VARIABLE.sub(' ', s)
    s = re.sub(r'\{[^}]*\}', ' ', s)          # label matchers
    s = re.sub(r'\[[^\]]*\]', ' ', s)          # ranges, subqueries
    s = re.sub(r'\b(by|without|on|ignoring|group_left|group_right)\s*'
               r'\([^)]*\)', ' ', s)           # label lists
    names = set()
    for m in TOKEN.finditer(s):
        word = m.group("id")
        if word is None:
            continue
        if m.group("call"):
            if word not in FUNCTIONS:
                raise ValueError("unknown function %r in %r" % (word, expr))
        elif word not in KEYWORDS:
            names.add(word)
    return names


def selectors(expr):
    """(metric, label, op, value) for each label matcher with a plain
    value (no Grafana variable) that follows a metric name."""
    out = []
    for m in SELECTOR.finditer(expr):
        for lm in MATCHER.finditer(m.group(2)):
            if "$" not in lm.group(3):
                out.append((m.group(1),) + lm.groups())
    return out


def scrape_index(text):
    """{series name: {label: {values}}} of every sample, and {series name:
    family} for every series the TYPE lines promise (a histogram's are
    _bucket, _sum and _count, never the bare family name)."""
    series, promised = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            suffixes = {"histogram": ("_bucket", "_sum", "_count"),
                        "summary": ("_sum", "_count")}.get(kind, ("",))
            for suffix in suffixes:
                promised[name + suffix] = name
            continue
        if line.startswith("#") or not line:
            continue
        m = SAMPLE.match(line)
        assert m, "not a sample: %r" % line
        labels = series.setdefault(m.group(1), {})
        for k, v in LABEL.findall(m.group(3) or ""):
            labels.setdefault(k, set()).add(v)
    return series, promised


def rule_exprs(path):
    """{alert or record name: expr} from the rules file; a small reader
    for the shapes it uses (expr: inline or a block scalar), so the test
    needs no YAML library."""
    with open(path) as f:
        lines = f.read().splitlines()
    out, name = {}, None
    i = 0
    while i < len(lines):
        m = re.match(r'^\s*-\s*(alert|record):\s*(\S+)\s*$', lines[i])
        if m:
            name = m.group(2)
        m = re.match(r'^(\s*)expr:\s*(.*)$', lines[i])
        if m:
            indent, value = len(m.group(1)), m.group(2).strip()
            if value in ("", ">", ">-", "|", "|-"):
                body = []
                while (i + 1 < len(lines) and
                       (not lines[i + 1].strip() or
                        len(lines[i + 1]) - len(lines[i + 1].lstrip())
                        > indent)):
                    i += 1
                    body.append(lines[i].strip())
                value = " ".join(b for b in body if b)
            elif value[0] in "'\"":
                value = value[1:-1]
            assert name not in out, "two exprs for %s" % name
            out[name] = value
        i += 1
    return out


def dashboard_exprs(path):
    """[(where, PromQL)] for every panel target and every query variable."""
    with open(path) as f:
        dash = json.load(f)
    out = []

    def panels(ps):
        for p in ps:
            yield p
            yield from panels(p.get("panels", []))
    for p in panels(dash["panels"]):
        for t in p.get("targets", []):
            out.append(("panel %r %s" % (p["title"], t["refId"]), t["expr"]))
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]
            q = q["query"] if isinstance(q, dict) else q
            out.append(("variable %s" % v["name"], grafana_query(q)))
    return dash, out


def missing(exprs, series, promised):
    """What the expressions name that the scrape does not have."""
    bad = []
    for where, expr in exprs:
        for name in sorted(metric_names(expr)):
            if name not in series and name not in promised and \
                    name not in SCRAPE_SERIES:
                bad.append("%s: %s is not exported" % (where, name))
        for metric, label, op, value in selectors(expr):
            if metric not in series or label in TARGET_LABELS:
                continue
            have = series[metric].get(label)
            if have is None:
                bad.append("%s: %s has no label %s" % (where, metric, label))
            elif op == "=" and value not in have:
                bad.append("%s: %s{%s=%r} is never exported" %
                           (where, metric, label, value))
            elif op == "=~" and re.fullmatch(r'[\w.+]+(\|[\w.+]+)*', value):
                for v in value.split("|"):
                    if v not in have:
                        bad.append("%s: %s{%s=~...%s...} is never exported"
                                   % (where, metric, label, v))
    return bad


class Parser(unittest.TestCase):
    """The name reader itself, on the shapes the files use."""

    def test_metric_names(self):
        self.assertEqual(metric_names(
            'histogram_quantile(0.99, sum by (job, instance, le) '
            '(rate(lockbroker_redis_rtt_seconds_bucket{job=~"$job"}'
            '[$__rate_interval]))) > 0.05'),
            {"lockbroker_redis_rtt_seconds_bucket"})
        self.assertEqual(metric_names(
            'lockbroker_waiters > 0 and on (job, instance) '
            'increase(lockbroker_grants_total[10m] offset 1h) == 0'),
            {"lockbroker_waiters", "lockbroker_grants_total"})
        self.assertEqual(metric_names(
            'sum(x{reason=~"a|b"}) / on (job) group_left(version) '
            'clamp_min(y, 1e3) unless absent(up{job="lockbroker"})'),
            {"x", "y", "up"})
        self.assertEqual(metric_names(grafana_query(
            'label_values(lockbroker_build_info{job=~"$job"}, instance)')),
            {"lockbroker_build_info"})
        self.assertEqual(metric_names(grafana_query('label_values(job)')),
                         set())
        with self.assertRaises(ValueError):
            metric_names("rat(lockbroker_grants_total[5m])")

    def test_missing_names_what_is_not_there(self):
        """What the real test asserts is empty does catch a wrong name, a
        histogram's bare family name, and a label value never exported."""
        series, promised = scrape_index(
            '# TYPE a_total counter\na_total 1\n'
            '# TYPE h histogram\nh_bucket{le="+Inf"} 0\nh_sum 0\nh_count 0\n'
            '# TYPE l_total counter\nl_total{reason="x"} 0\n')
        self.assertEqual(missing([("p", 'rate(a_total[5m]) + h_count + '
                                   'h_bucket + l_total{reason="x"}')],
                                 series, promised), [])
        self.assertEqual(missing([("p", "rate(b_total[5m])"), ("q", "h"),
                                  ("r", 'l_total{reason=~"x|y"}'),
                                  ("s", 'a_total{reason="x"}')],
                                 series, promised),
                         ["p: b_total is not exported",
                          "q: h is not exported",
                          "r: l_total{reason=~...y...} is never exported",
                          "s: a_total has no label reason"])


class Monitoring(BrokerTest):

    def setUp(self):
        self.mport = free_port()
        self.conf = {"metrics": {"enabled": True, "port": self.mport}}
        super().setUp()

    def scrape(self):
        url = "http://127.0.0.1:%d/metrics" % self.mport
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read().decode()

    def activity(self):
        """Grants, a wait, a TIMEOUT, a release, a fixed lease running out
        (EVENT LOST expired): the histograms and lost_total get values."""
        a, b = self.client(), self.client()
        self.assertRegex(a.cmd("ACQUIRE mon"), r"^OK ")
        self.assertEqual(b.cmd("ACQUIRE mon WAIT 20"), "TIMEOUT")
        b.send("ACQUIRE mon")
        self.broker.wait_info("waiters", 1)
        self.assertEqual(a.cmd("RELEASE mon"), "OK")
        self.assertRegex(b.line(), r"^OK ")
        self.assertRegex(a.cmd("ACQUIRE brief TTL 200"), r"^OK ")
        self.assertRegex(a.line(), r"^EVENT LOST brief \d+ expired$")

    def test_every_name_is_exported(self):
        self.activity()
        text = self.scrape()
        series, promised = scrape_index(text)
        self.assertEqual(series["lockbroker_lost_total"]["reason"],
                         {"expired", "stolen", "unavailable", "maxhold",
                          "revoked"})
        rules = rule_exprs(RULES)
        self.assertGreaterEqual(len(rules), 10, "the rules were not read")
        dash, queries = dashboard_exprs(DASHBOARD)
        self.assertGreaterEqual(len(queries), 20, "no queries were read")
        exprs = [("rule %s" % n, e) for n, e in rules.items()] + queries
        self.assertEqual(missing(exprs, series, promised), [])
        # Shown for whoever adds a metric: what no panel or rule uses yet.
        named = set()
        for _, e in exprs:
            named |= metric_names(e)
        unused = sorted(set(promised.values()) -
                        {promised.get(n, n) for n in named})
        if unused:
            print("\nexported but in no rule or panel: %s" % " ".join(unused))

    def test_exposition_passes_promtool_lint(self):
        if PROMTOOL is None:
            self.skipTest("promtool not found (Debian package prometheus): "
                          "the exposition is not linted")
        self.activity()
        r = subprocess.run([PROMTOOL, "check", "metrics"],
                           input=self.scrape(), capture_output=True,
                           text=True, timeout=60)
        self.assertEqual((r.returncode, r.stdout + r.stderr), (0, ""))


class RealPrometheus(BrokerTest):
    """The dashboard's queries against a real Prometheus (Debian has no
    Grafana to import it into) that scrapes two brokers and itself."""

    def setUp(self):
        if shutil.which("prometheus") is None:
            self.skipTest("prometheus not found (Debian package prometheus)")
        self.mport = free_port()
        self.conf = {"metrics": {"enabled": True, "port": self.mport}}
        super().setUp()

    activity = Monitoring.activity

    def api(self, path):
        url = "http://127.0.0.1:%d/api/v1/%s" % (self.pport, path)
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                out = json.loads(r.read().decode())
        except urllib.error.HTTPError as e:
            raise AssertionError("%s: %s" % (path, e.read().decode()))
        self.assertEqual(out["status"], "success", out)
        return out["data"]

    def query(self, expr):
        return self.api("query?query=" + urllib.parse.quote(expr))["result"]

    def test_dashboard_on_two_brokers_and_prometheus(self):
        """Every panel query, its variables set to All as Grafana sets them
        (the values label_values finds, joined as a regex), is answered;
        the panels that read series every target has (up, process_*)
        show the two brokers only."""
        import signal
        other = free_port()
        b2 = self.start_broker({"metrics": {"enabled": True, "port": other}},
                               name="second")
        tmp = tempfile.mkdtemp(prefix="lbprom-")
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        self.pport = free_port()
        with open(os.path.join(tmp, "prometheus.yml"), "w") as f:
            f.write("global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                    "scrape_configs:\n"
                    "  - job_name: lockbroker\n"
                    "    static_configs: [{targets: ['127.0.0.1:%d', "
                    "'127.0.0.1:%d']}]\n"
                    "  - job_name: prometheus\n"
                    "    static_configs: [{targets: ['127.0.0.1:%d']}]\n"
                    % (self.mport, other, self.pport))
        log = open(os.path.join(tmp, "prometheus.log"), "w")
        self.addCleanup(log.close)
        p = subprocess.Popen(
            ["prometheus", "--config.file=" + os.path.join(tmp,
                                                           "prometheus.yml"),
             "--storage.tsdb.path=" + os.path.join(tmp, "data"),
             "--web.listen-address=127.0.0.1:%d" % self.pport],
            stdout=log, stderr=subprocess.STDOUT)
        self.addCleanup(lambda: (p.send_signal(signal.SIGTERM), p.wait(30)))
        self.activity()
        self.assertRegex(self.client(b2).cmd("ACQUIRE two"), r"^OK ")

        def scraped():
            try:
                up = self.query("up")
            except OSError:
                return False
            return len(up) == 3 and all(u["value"][1] == "1" for u in up)
        wait_until(scraped, 30, "three targets up")
        # Two scrapes of each after the activity, for rate() and changes().
        wait_until(lambda: len(self.query(
            "count_over_time(lockbroker_build_info[10s])")) == 2 and
            all(float(r["value"][1]) >= 3 for r in self.query(
                "count_over_time(lockbroker_build_info[10s])")),
            30, "three scrapes of each broker")
        dash, queries = dashboard_exprs(DASHBOARD)
        values = {}
        for v in dash["templating"]["list"]:
            if v["type"] != "query":
                continue
            self.assertNotIn("allValue", v, v["name"])
            # Grafana escapes each value for a PromQL string: a regex
            # backslash, doubled.
            values[v["name"]] = "|".join(
                re.escape(x).replace("\\", "\\\\") for x in self.api(
                    "label/%s/values?match[]=lockbroker_build_info" %
                    v["name"]))
        self.assertEqual(values["job"], "lockbroker")
        checked = 0
        for where, expr in queries:
            if not where.startswith("panel"):
                continue
            expr = re.sub(r'\$__(rate_interval|interval|range)\b', '10s',
                          expr)
            expr = VARIABLE.sub(lambda m: values[m.group(0).strip("${}")],
                                expr)
            result = self.query(expr)
            checked += 1
            for r in result:
                inst = r["metric"].get("instance")
                self.assertIn(inst, (None, "127.0.0.1:%d" % self.mport,
                                     "127.0.0.1:%d" % other), (where, r))
            if where.startswith("panel 'Brokers up'"):
                self.assertEqual(result[0]["value"][1], "2", result)
        self.assertGreaterEqual(checked, 40)


class Dashboard(unittest.TestCase):
    """What Grafana needs to import it, checked without a Grafana."""

    def test_shape(self):
        dash, queries = dashboard_exprs(DASHBOARD)
        self.assertGreaterEqual(dash["schemaVersion"], 36)
        self.assertEqual(dash["uid"], "lockbroker")
        variables = {v["name"]: v for v in dash["templating"]["list"]}
        self.assertEqual(variables["datasource"]["type"], "datasource")
        self.assertEqual(variables["datasource"]["query"], "prometheus")
        ids, cells = set(), set()
        for p in dash["panels"]:
            self.assertNotIn(p["id"], ids)
            ids.add(p["id"])
            g = p["gridPos"]
            self.assertLessEqual(g["x"] + g["w"], 24, p["title"])
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    self.assertNotIn((x, y), cells, "%s overlaps" % p["title"])
                    cells.add((x, y))
            if p["type"] == "row":
                continue
            self.assertEqual(p["datasource"]["uid"], "${datasource}")
            self.assertTrue(p["targets"], p["title"])
            refs = [t["refId"] for t in p["targets"]]
            self.assertEqual(len(refs), len(set(refs)), p["title"])
            for t in p["targets"]:
                self.assertEqual(t["datasource"]["uid"], "${datasource}")
                # Every query follows the job and instance pickers.
                for sel in re.findall(r'[a-z_]+\{[^}]*\}', t["expr"]):
                    self.assertIn('job=~"$job"', sel, p["title"])
                    self.assertIn('instance=~"$instance"', sel, p["title"])


class Promtool(unittest.TestCase):

    def setUp(self):
        if PROMTOOL is None:
            self.skipTest("promtool not found (Debian package prometheus): "
                          "the rules are not checked")

    def run_promtool(self, *args):
        r = subprocess.run([PROMTOOL] + list(args), capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r.stdout + r.stderr

    def test_check_rules(self):
        out = self.run_promtool("check", "rules", RULES)
        self.assertIn("SUCCESS: %d rules found" % len(rule_exprs(RULES)),
                      out)

    def test_dashboard_queries_parse(self):
        """Every dashboard query, its Grafana variables given values, is
        PromQL that Prometheus accepts (as a recording rule)."""
        _, queries = dashboard_exprs(DASHBOARD)
        rules = []
        for i, (where, expr) in enumerate(queries):
            expr = re.sub(r'\$__(rate_interval|interval|range)\b', '5m',
                          expr)
            expr = VARIABLE.sub('.*', expr)
            rules.append('      - record: dashboard:query_%d  # %s\n'
                         '        expr: %s\n' % (i, where, json.dumps(expr)))
        path = os.path.join(self.tmp(), "dashboard.rules.yml")
        with open(path, "w") as f:
            f.write("groups:\n  - name: dashboard\n    rules:\n" +
                    "".join(rules))
        out = self.run_promtool("check", "rules", path)
        self.assertIn("SUCCESS: %d rules found" % len(queries), out)

    def test_all_means_the_brokers_only(self):
        """With "All" picked (Grafana's default), a panel counts only the
        brokers, not every target of the Prometheus: here Prometheus
        scrapes itself too, and "Brokers up" must be 1, "Resident
        memory" and "Restarts" one series each. Grafana's All is a
        variable's allValue if it has one, else its values joined as a
        regex (those of label_values(lockbroker_build_info, ...))."""
        dash, queries = dashboard_exprs(DASHBOARD)
        values = {"job": ["lockbroker"], "instance": ["b1:7879"]}
        subst = {}
        for v in dash["templating"]["list"]:
            if v["name"] in values:
                subst[v["name"]] = v.get("allValue") or \
                    "|".join(map(re.escape, values[v["name"]]))
        want = {"Brokers up": "1", "Resident memory": None,
                "Restarts": None}
        rules, tests = [], []
        for where, expr in queries:
            title = re.match(r"panel '([^']*)'", where)
            if title is None or title.group(1) not in want:
                continue
            expr = re.sub(r'\$__(rate_interval|interval|range)\b', '5m',
                          expr)
            expr = VARIABLE.sub(lambda m: subst[m.group(0).strip("${}")],
                                expr)
            name = "all:%s" % re.sub(r"\W", "_", title.group(1)).lower()
            rules.append('      - record: %s\n        expr: %s\n' %
                         (name, json.dumps(expr)))
            tests.append(name)
        self.assertEqual(len(tests), len(want), tests)
        d = self.tmp()
        with open(os.path.join(d, "all.rules.yml"), "w") as f:
            f.write("groups:\n  - name: all\n    rules:\n" + "".join(rules))
        series = [
            ('up{job="lockbroker",instance="b1:7879"}', "1x20"),
            ('up{job="prometheus",instance="localhost:9090"}', "1x20"),
            ('lockbroker_build_info{job="lockbroker",instance="b1:7879",'
             'version="1"}', "1x20"),
            ('process_resident_memory_bytes{job="lockbroker",'
             'instance="b1:7879"}', "1000x20"),
            ('process_resident_memory_bytes{job="prometheus",'
             'instance="localhost:9090"}', "9000x20"),
            ('process_start_time_seconds{job="lockbroker",'
             'instance="b1:7879"}', "5x20"),
            ('process_start_time_seconds{job="prometheus",'
             'instance="localhost:9090"}', "7x20")]
        checks = []
        for name in tests:
            if name == "all:brokers_up":
                out = '            - labels: \'%s\'\n              value: 1\n' \
                    % name
            else:
                out = ('            - labels: \'%s{instance="b1:7879",'
                       'job="lockbroker"}\'\n              value: %s\n' %
                       (name, "1000" if "memory" in name else "0"))
            checks.append('        - expr: %s\n          eval_time: 10m\n'
                          '          exp_samples:\n%s' % (name, out))
        with open(os.path.join(d, "all.test.yml"), "w") as f:
            f.write("rule_files: [all.rules.yml]\nevaluation_interval: 1m\n"
                    "tests:\n  - interval: 1m\n    input_series:\n" +
                    "".join('      - series: \'%s\'\n        values: %s\n'
                            % s for s in series) +
                    "    promql_expr_test:\n" + "".join(checks))
        self.run_promtool("test", "rules", os.path.join(d, "all.test.yml"))

    def tmp(self):
        d = tempfile.mkdtemp(prefix="lbtest-")
        self.addCleanup(shutil.rmtree, d, ignore_errors=True)
        return d

    def test_unit_tests_cover_every_alert(self):
        out = self.run_promtool("test", "rules", RULES_TEST)
        self.assertIn("SUCCESS", out)
        with open(RULES_TEST) as f:
            tested = set(re.findall(r'alertname:\s*(\S+)', f.read()))
        self.assertEqual(set(rule_exprs(RULES)) - tested, set())


if __name__ == "__main__":
    main()
