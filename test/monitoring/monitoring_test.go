// Package monitoring checks config/prometheus against the code it monitors: the
// ServiceMonitor, PodMonitor and PrometheusRule decode strictly into prometheus-operator's
// types, select what the manifests and the probe Job builder actually create, and every
// metric the rules and the Grafana dashboard query is one the manager or the probe gateway
// exports. PromQL syntax and the rules' behaviour are checked by promtool (make test-rules).
package monitoring

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/slo"
)

const root = "../.."

// The files that define the exported metrics, and how they name them.
var (
	metricSources = []string{"controllers/metrics.go", "controllers/metrics_crawlers.go", "probes/gateway/gateway.go"}
	optsName      = regexp.MustCompile(`(Counter|Gauge|Histogram|Summary)Opts\{\s*Name:\s*"([^"]+)"`)
	descName      = regexp.MustCompile(`NewDesc\(\s*"([^"]+)"`)
	// optsEntry is a name in a table of prometheus.Opts (controllers' per-crawler gauges).
	optsEntry = regexp.MustCompile(`:\s*\{Name:\s*"((?:isochron|rtprobe)_[^"]+)"`)
	// A metric or recording-rule name of isochron's in a PromQL expression.
	metricRef = regexp.MustCompile(`(?:^|[^A-Za-z0-9_:])((?:isochron|rtprobe)_[A-Za-z0-9_:]*)`)
	jobMatch  = regexp.MustCompile(`job\s*=~?\s*"([^"]*)"`)
)

// The runbook anchors in docs/operations.md that alerts may point at.
var runbookAnchors = []string{"slo-burn-rate", "slo-refuted", "crawler-unplaceable", "crawler-at-risk", "probe-failures", "operator-down", "nic-agent-down", "reconcile-errors"}

// The metrics of others that alerts query, by who exports them: controller-runtime's
// from the manager's own endpoint, kube-state-metrics' of the objects isochron installs
// (the NIC agent serves no metrics).
var thirdPartyMetrics = map[string]string{
	"controller_runtime_reconcile_errors_total": "controller-runtime, on the manager's endpoint",
	"kube_daemonset_status_number_unavailable":  "kube-state-metrics",
}

// --- reading the repository ---------------------------------------------------

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// documents splits a YAML file into its documents, skipping empty ones.
func documents(t *testing.T, path string) [][]byte {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(read(t, path))))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var probe map[string]any
		if err := yaml.Unmarshal(doc, &probe); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(probe) > 0 {
			docs = append(docs, doc)
		}
	}
}

func kindOf(t *testing.T, doc []byte) string {
	t.Helper()
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		t.Fatal(err)
	}
	return tm.Kind
}

// strict decodes doc into v, failing on fields the type does not have.
func strict(t *testing.T, path string, doc []byte, v any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// monitoringObjects are the objects of config/prometheus, decoded strictly.
type monitoringObjects struct {
	serviceMonitors []monitoringv1.ServiceMonitor
	podMonitors     []monitoringv1.PodMonitor
	rules           []monitoringv1.PrometheusRule
	files           []string
}

func loadMonitoring(t *testing.T) monitoringObjects {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(root, "config/prometheus/*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m monitoringObjects
	for _, p := range paths {
		name := filepath.Base(p)
		if name == "kustomization.yaml" {
			continue
		}
		m.files = append(m.files, name)
		path := filepath.Join("config/prometheus", name)
		for _, doc := range documents(t, path) {
			switch kind := kindOf(t, doc); kind {
			case "ServiceMonitor":
				var o monitoringv1.ServiceMonitor
				strict(t, path, doc, &o)
				m.serviceMonitors = append(m.serviceMonitors, o)
			case "PodMonitor":
				var o monitoringv1.PodMonitor
				strict(t, path, doc, &o)
				m.podMonitors = append(m.podMonitors, o)
			case "PrometheusRule":
				var o monitoringv1.PrometheusRule
				strict(t, path, doc, &o)
				m.rules = append(m.rules, o)
			case "ClusterRole":
				strict(t, path, doc, &rbacv1.ClusterRole{})
			case "ClusterRoleBinding":
				strict(t, path, doc, &rbacv1.ClusterRoleBinding{})
			default:
				t.Fatalf("%s: kind %q: add it to this test's strict decoding", path, kind)
			}
		}
	}
	if len(m.serviceMonitors) != 1 || len(m.podMonitors) != 1 || len(m.rules) != 1 {
		t.Fatalf("config/prometheus has %d ServiceMonitors, %d PodMonitors, %d PrometheusRules; want one each",
			len(m.serviceMonitors), len(m.podMonitors), len(m.rules))
	}
	return m
}

// exportedMetrics are the metric names the manager and the probe gateway register, with
// the series names a histogram adds.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, src := range metricSources {
		code := read(t, src)
		for _, m := range optsName.FindAllSubmatch(code, -1) {
			name := string(m[2])
			names[name] = true
			if string(m[1]) == "Histogram" {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					names[name+suffix] = true
				}
			}
		}
		for _, m := range descName.FindAllSubmatch(code, -1) {
			names[string(m[1])] = true
		}
		for _, m := range optsEntry.FindAllSubmatch(code, -1) {
			names[string(m[1])] = true
		}
	}
	if len(names) < 20 {
		t.Fatalf("found only %d metric names in %v: has the way they are declared changed?", len(names), metricSources)
	}
	return names
}

// dashboard is what this test reads of a Grafana dashboard.
type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	Targets    []target    `json:"targets"`
	Panels     []panel     `json:"panels"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type target struct {
	RefID      string      `json:"refId"`
	Expr       string      `json:"expr"`
	Datasource *datasource `json:"datasource"`
}

const dashboardPath = "config/prometheus/dashboards/isochron.json"

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(read(t, dashboardPath), &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	return d
}

// queries are a dashboard's PromQL expressions (panel targets) and its variables' queries
// (label_values(...)), each named for error messages.
func (d dashboard) queries() (exprs, variables map[string]string) {
	exprs, variables = map[string]string{}, map[string]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				exprs["panel "+p.Title+" "+tg.RefID] = tg.Expr
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) != nil {
			_ = json.Unmarshal(v.Query, &q.Query) // older dashboards: a plain string
		}
		variables["variable "+v.Name] = q.Query
	}
	return exprs, variables
}

// ruleExprs are the PrometheusRule's expressions by rule, and the names it records.
func ruleExprs(pr monitoringv1.PrometheusRule) (exprs map[string]string, recorded map[string]bool) {
	exprs, recorded = map[string]string{}, map[string]bool{}
	for _, g := range pr.Spec.Groups {
		for i, r := range g.Rules {
			exprs[fmt.Sprintf("%s/%s[%d]", g.Name, r.Record+r.Alert, i)] = r.Expr.String()
			if r.Record != "" {
				recorded[r.Record] = true
			}
		}
	}
	return exprs, recorded
}

// balanced reports whether expr's brackets pair up outside its string literals.
func balanced(expr string) bool {
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	var quote rune
	escaped := false
	for _, c := range expr {
		switch {
		case quote != 0:
			if escaped {
				escaped = false
			} else if c == '\\' && quote != '`' {
				escaped = true
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'' || c == '`':
			quote = c
		case c == '(' || c == '[' || c == '{':
			stack = append(stack, c)
		case c == ')' || c == ']' || c == '}':
			if len(stack) == 0 || stack[len(stack)-1] != pairs[c] {
				return false
			}
			stack = stack[:len(stack)-1]
		}
	}
	return len(stack) == 0 && quote == 0
}

// managerJob is the job label of the manager's scrape: the ServiceMonitor's default, the
// name of the Service it selects as config/system names it.
func managerJob(t *testing.T) string {
	t.Helper()
	var k struct {
		NamePrefix string `json:"namePrefix"`
	}
	if err := yaml.Unmarshal(read(t, "config/system/kustomization.yaml"), &k); err != nil {
		t.Fatal(err)
	}
	return k.NamePrefix + metricsService(t).Name
}

// metricsService is the manager's metrics Service in config/manager.
func metricsService(t *testing.T) corev1.Service {
	t.Helper()
	for _, doc := range documents(t, "config/manager/manager.yaml") {
		if kindOf(t, doc) == "Service" {
			var s corev1.Service
			strict(t, "config/manager/manager.yaml", doc, &s)
			return s
		}
	}
	t.Fatal("config/manager/manager.yaml has no Service")
	return corev1.Service{}
}

// --- tests --------------------------------------------------------------------

func TestEveryQueriedMetricIsExported(t *testing.T) {
	m := loadMonitoring(t)
	exported := exportedMetrics(t)
	rules, recorded := ruleExprs(m.rules[0])
	dashExprs, dashVars := loadDashboard(t).queries()

	sources := map[string]map[string]string{"rules.yaml": rules, "dashboard": dashExprs, "dashboard variables": dashVars}
	for source, exprs := range sources {
		for where, expr := range exprs {
			refs := metricRef.FindAllStringSubmatch(expr, -1)
			if len(refs) == 0 && !strings.Contains(expr, "up{") && !queriesThirdParty(expr) {
				t.Errorf("%s %s: queries no isochron metric: %s", source, where, expr)
			}
			for _, ref := range refs {
				name := ref[1]
				switch {
				case strings.Contains(name, ":") && !recorded[name]:
					t.Errorf("%s %s: %s is not a recording rule in config/prometheus/rules.yaml", source, where, name)
				case !strings.Contains(name, ":") && !exported[name]:
					t.Errorf("%s %s: %s is not exported by %v (renamed?)", source, where, name, metricSources)
				}
			}
		}
	}
}

func queriesThirdParty(expr string) bool {
	for name := range thirdPartyMetrics {
		if strings.Contains(expr, name+"{") {
			return true
		}
	}
	return false
}

// TestAlertsSelectWhatIsInstalled: the alerts on others' metrics select the NIC agent's
// DaemonSet by the name and namespace config/nic-agent gives it, and the CrawlerVM
// controller by the name controllers/watches.go gives it.
func TestAlertsSelectWhatIsInstalled(t *testing.T) {
	var kust struct {
		Namespace  string `json:"namespace"`
		NamePrefix string `json:"namePrefix"`
	}
	if err := yaml.Unmarshal(read(t, "config/nic-agent/kustomization.yaml"), &kust); err != nil {
		t.Fatal(err)
	}
	var ds metav1.PartialObjectMetadata
	if err := yaml.Unmarshal(read(t, "config/nic-agent/daemonset.yaml"), &ds); err != nil {
		t.Fatal(err)
	}
	controller := regexp.MustCompile(`Named\("([^"]+)"\)`).FindSubmatch(read(t, "controllers/watches.go"))
	if controller == nil {
		t.Fatal(`controllers/watches.go names no controller (Named("..."))`)
	}
	want := map[string][]string{
		"IsochronNICAgentDown":    {`namespace="` + kust.Namespace + `"`, `daemonset="` + kust.NamePrefix + ds.Name + `"`},
		"IsochronReconcileErrors": {`controller="` + string(controller[1]) + `"`},
	}
	m := loadMonitoring(t)
	for _, g := range m.rules[0].Spec.Groups {
		for _, r := range g.Rules {
			for _, sel := range want[r.Alert] {
				if !strings.Contains(r.Expr.String(), sel) {
					t.Errorf("%s: %s does not select %s", r.Alert, r.Expr.String(), sel)
				}
			}
			delete(want, r.Alert)
		}
	}
	for alert := range want {
		t.Errorf("no alert %s", alert)
	}
}

func TestQueriesNameTheManagerJob(t *testing.T) {
	m := loadMonitoring(t)
	want := managerJob(t)
	rules, _ := ruleExprs(m.rules[0])
	dashExprs, _ := loadDashboard(t).queries()
	found := 0
	for where, expr := range mergeMaps(rules, dashExprs) {
		for _, j := range jobMatch.FindAllStringSubmatch(expr, -1) {
			found++
			if j[1] != want {
				t.Errorf("%s: job %q, but the ServiceMonitor's job label is the Service's name %q", where, j[1], want)
			}
		}
	}
	if found == 0 {
		t.Errorf("no query selects job %q (IsochronOperatorDown should)", want)
	}
}

func mergeMaps(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.Title == "" || d.UID == "" || d.SchemaVersion == 0 {
		t.Errorf("%s: title %q, uid %q, schemaVersion %d: want all set", dashboardPath, d.Title, d.UID, d.SchemaVersion)
	}
	ids := map[int]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if other, dup := ids[p.ID]; dup {
				t.Errorf("panels %q and %q share id %d", other, p.Title, p.ID)
			}
			ids[p.ID] = p.Title
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || p.Datasource.UID == "" {
				t.Errorf("panel %q has no datasource", p.Title)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no targets", p.Title)
			}
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				if tg.Datasource == nil || tg.Datasource.UID == "" {
					t.Errorf("panel %q target %s has no datasource", p.Title, tg.RefID)
				}
				if tg.RefID == "" || refs[tg.RefID] {
					t.Errorf("panel %q: target refId %q empty or repeated", p.Title, tg.RefID)
				}
				refs[tg.RefID] = true
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("panel %q target %s has no expr", p.Title, tg.RefID)
				}
			}
		}
	}
	walk(d.Panels)
	exprs, vars := d.queries()
	for where, expr := range mergeMaps(exprs, vars) {
		if !balanced(expr) {
			t.Errorf("%s: unbalanced brackets or quotes: %s", where, expr)
		}
	}
}

func TestAlerts(t *testing.T) {
	m := loadMonitoring(t)
	used := map[string]bool{}
	anchor := regexp.MustCompile(`^https://\S+/docs/operations\.md#([a-z0-9-]+)$`) // absolute: a runbook link works from Alertmanager
	for _, g := range m.rules[0].Spec.Groups {
		for _, r := range g.Rules {
			if !balanced(r.Expr.String()) {
				t.Errorf("%s: unbalanced brackets or quotes: %s", r.Record+r.Alert, r.Expr.String())
			}
			if r.Alert == "" {
				continue
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q, want critical (page) or warning (ticket)", r.Alert, s)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[a] == "" {
					t.Errorf("%s: no %s annotation", r.Alert, a)
				}
			}
			if strings.Contains(r.Expr.String(), "isochron_crawler") {
				for _, a := range []string{"summary", "description"} {
					if !strings.Contains(r.Annotations[a], "$labels.namespace") || !strings.Contains(r.Annotations[a], "$labels.name") {
						t.Errorf("%s: the %s does not name the crawler ($labels.namespace, $labels.name)", r.Alert, a)
					}
				}
			}
			mm := anchor.FindStringSubmatch(r.Annotations["runbook_url"])
			if mm == nil || !slices.Contains(runbookAnchors, mm[1]) {
				t.Errorf("%s: runbook_url %q, want https://.../docs/operations.md#<one of %v>", r.Alert, r.Annotations["runbook_url"], runbookAnchors)
				continue
			}
			used[mm[1]] = true
		}
	}
	headings := docHeadings(t)
	for _, a := range runbookAnchors {
		if !used[a] {
			t.Errorf("no alert points at the runbook docs/operations.md#%s", a)
		}
		if !headings[a] {
			t.Errorf("docs/operations.md has no heading with anchor #%s", a)
		}
	}
}

// docHeadings are the anchors of docs/operations.md's headings, as GitHub makes them.
func docHeadings(t *testing.T) map[string]bool {
	t.Helper()
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	out := map[string]bool{}
	inCode := false
	for _, line := range strings.Split(string(read(t, "docs/operations.md")), "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		out[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(text), ""), " ", "-")] = true
	}
	return out
}

func TestComponentListsEveryManifest(t *testing.T) {
	m := loadMonitoring(t)
	var k struct {
		APIVersion         string   `json:"apiVersion"`
		Kind               string   `json:"kind"`
		Resources          []string `json:"resources"`
		ConfigMapGenerator []struct {
			Name    string   `json:"name"`
			Files   []string `json:"files"`
			Options struct {
				DisableNameSuffixHash bool              `json:"disableNameSuffixHash"`
				Labels                map[string]string `json:"labels"`
			} `json:"options"`
		} `json:"configMapGenerator"`
	}
	if err := yaml.Unmarshal(read(t, "config/prometheus/kustomization.yaml"), &k); err != nil {
		t.Fatal(err)
	}
	if k.Kind != "Component" || k.APIVersion != "kustomize.config.k8s.io/v1alpha1" {
		t.Errorf("config/prometheus is %s %s, want a kustomize.config.k8s.io/v1alpha1 Component", k.APIVersion, k.Kind)
	}
	got := slices.Clone(k.Resources)
	sort.Strings(got)
	sort.Strings(m.files)
	if !slices.Equal(got, m.files) {
		t.Errorf("config/prometheus/kustomization.yaml resources %v, want the directory's manifests %v", got, m.files)
	}
	if len(k.ConfigMapGenerator) != 1 || len(k.ConfigMapGenerator[0].Files) != 1 {
		t.Fatalf("want one configMapGenerator with the dashboard, got %+v", k.ConfigMapGenerator)
	}
	g := k.ConfigMapGenerator[0]
	if file := g.Files[0][strings.Index(g.Files[0], "=")+1:]; filepath.Join("config/prometheus", file) != dashboardPath {
		t.Errorf("the dashboard ConfigMap holds %s, want %s", file, dashboardPath)
	}
	if !g.Options.DisableNameSuffixHash || g.Options.Labels["grafana_dashboard"] != "1" {
		t.Errorf("the dashboard ConfigMap needs disableNameSuffixHash and the label grafana_dashboard: \"1\", got %+v", g.Options)
	}
}

func TestServiceMonitorSelectsTheMetricsService(t *testing.T) {
	sm := loadMonitoring(t).serviceMonitors[0]
	svc := metricsService(t)
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(svc.Labels)) {
		t.Errorf("ServiceMonitor selector %v does not match the metrics Service's labels %v", sel, svc.Labels)
	}
	if sm.Namespace != svc.Namespace {
		t.Errorf("ServiceMonitor in namespace %q, the Service in %q: it only selects Services in its own", sm.Namespace, svc.Namespace)
	}
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("want one endpoint, got %d", len(sm.Spec.Endpoints))
	}
	ep := sm.Spec.Endpoints[0]
	if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
		t.Errorf("endpoint port %q is not a port of the metrics Service %v", ep.Port, svc.Spec.Ports)
	}
	if ep.Scheme == nil || strings.ToLower(string(*ep.Scheme)) != "https" || ep.BearerTokenFile == "" || ep.TLSConfig == nil { //nolint:staticcheck // SA1019: the ServiceMonitor reads the scraper's own service-account token file, as Kubebuilder's does; `authorization` would need the token copied into a Secret.
		t.Errorf("the manager serves HTTPS to callers with a bearer token: want scheme https, bearerTokenFile and tlsConfig, got %+v", ep)
	}
	if !ep.HonorLabels {
		t.Error("honorLabels is off: the crawlers' namespace label would become exported_namespace")
	}
	// The scrape verifies the manager's certificate: against the CA of the Secret the
	// manager serves (its metrics-certs volume), for the Service's DNS name.
	if tc := ep.TLSConfig; tc != nil {
		if tc.InsecureSkipVerify != nil && *tc.InsecureSkipVerify {
			t.Error("tlsConfig skips verifying the manager's certificate")
		}
		var k struct {
			Namespace string `json:"namespace"`
		}
		if err := yaml.Unmarshal(read(t, "config/system/kustomization.yaml"), &k); err != nil {
			t.Fatal(err)
		}
		want := managerJob(t) + "." + k.Namespace + ".svc"
		if tc.ServerName == nil || *tc.ServerName != want {
			t.Errorf("tlsConfig serverName %v, want the metrics Service's name as installed, %s", ptr.Deref(tc.ServerName, "none"), want)
		}
		if tc.CA.Secret == nil || tc.CA.Secret.Key != "ca.crt" || tc.CA.Secret.Name != metricsCertSecret(t) {
			t.Errorf("tlsConfig ca %+v: want key ca.crt of the Secret the manager serves (%s)", tc.CA, metricsCertSecret(t))
		}
	}
}

// metricsCertSecret is the Secret of the manager's metrics-certs volume in config/manager.
func metricsCertSecret(t *testing.T) string {
	t.Helper()
	for _, doc := range documents(t, "config/manager/manager.yaml") {
		if kindOf(t, doc) != "Deployment" {
			continue
		}
		var d appsv1.Deployment
		strict(t, "config/manager/manager.yaml", doc, &d)
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == "metrics-certs" && v.Secret != nil {
				return v.Secret.SecretName
			}
		}
	}
	t.Fatal("config/manager/manager.yaml: the Deployment has no metrics-certs Secret volume")
	return ""
}

func TestPodMonitorSelectsProbePods(t *testing.T) {
	pm := loadMonitoring(t).podMonitors[0]
	cvm := &isov1.CrawlerVM{ObjectMeta: metav1.ObjectMeta{Namespace: "crawlers", Name: "c1", UID: "u1", Generation: 1}}
	cvm.Spec.ErrorBudget.Objective = "99.999"
	job := slo.Job(cvm, slo.Run{Trigger: isov1.TriggerSchedule, Generation: 1, VMIUID: "v1"}, slo.Target{}, slo.DefaultOptions(slo.DefaultImage))
	pod := job.Spec.Template

	sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(pod.Labels)) {
		t.Errorf("PodMonitor selector %v does not match the probe pods' labels %v", sel, pod.Labels)
	}
	if !pm.Spec.NamespaceSelector.Any {
		t.Error("probe pods run in their crawler's namespace: the PodMonitor needs namespaceSelector.any")
	}
	if job.Namespace != cvm.Namespace {
		t.Errorf("probe Job in namespace %q, crawler in %q: the namespace label would not be the crawler's", job.Namespace, cvm.Namespace)
	}
	if len(pm.Spec.PodMetricsEndpoints) != 1 {
		t.Fatalf("want one endpoint, got %d", len(pm.Spec.PodMetricsEndpoints))
	}
	ep := pm.Spec.PodMetricsEndpoints[0]
	var ports []string
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			ports = append(ports, p.Name)
		}
	}
	if port := ptr.Deref(ep.Port, ""); !slices.Contains(ports, port) {
		t.Errorf("endpoint port %q is not a container port of the probe pod %v", port, ports)
	}
	if ep.Path != "/metrics" {
		t.Errorf("endpoint path %q, want /metrics (probes/gateway)", ep.Path)
	}
	crawlerLabel := "__meta_kubernetes_pod_label_" + regexp.MustCompile(`[^a-zA-Z0-9_]`).ReplaceAllString(isov1.LabelCrawlerVM, "_")
	relabelled := slices.ContainsFunc(ep.RelabelConfigs, func(r monitoringv1.RelabelConfig) bool {
		return len(r.SourceLabels) == 1 && string(r.SourceLabels[0]) == crawlerLabel && r.TargetLabel == "name"
	})
	if !relabelled {
		t.Errorf("no relabeling of %s into name: %+v", crawlerLabel, ep.RelabelConfigs)
	}
}

func TestThirdPartyCRDs(t *testing.T) {
	const dir = "config/thirdparty/prometheus-operator"
	paths, err := filepath.Glob(filepath.Join(root, dir, "monitoring.coreos.com_*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var files, kinds []string
	for _, p := range paths {
		path := filepath.Join(dir, filepath.Base(p))
		files = append(files, filepath.Base(p))
		docs := documents(t, path)
		if len(docs) != 1 {
			t.Fatalf("%s: %d documents, want one CRD", path, len(docs))
		}
		var crd apiextv1.CustomResourceDefinition
		strict(t, path, docs[0], &crd)
		if crd.APIVersion != "apiextensions.k8s.io/v1" || crd.Kind != "CustomResourceDefinition" {
			t.Errorf("%s: %s %s, want an apiextensions.k8s.io/v1 CustomResourceDefinition", path, crd.APIVersion, crd.Kind)
		}
		kinds = append(kinds, crd.Spec.Names.Kind)
		if !slices.ContainsFunc(crd.Spec.Versions, func(v apiextv1.CustomResourceDefinitionVersion) bool {
			return v.Name == "v1" && v.Served && v.Storage
		}) {
			t.Errorf("%s: no served and stored version v1", path)
		}
		// What the API server checks on create.
		apiextv1.SetObjectDefaults_CustomResourceDefinition(&crd)
		var internal apiextensions.CustomResourceDefinition
		if err := apiextv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(&crd, &internal, nil); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), &internal); len(errs) > 0 {
			t.Errorf("%s: invalid CRD: %v", path, errs.ToAggregate())
		}
	}
	sort.Strings(kinds)
	if want := []string{"PodMonitor", "PrometheusRule", "ServiceMonitor"}; !slices.Equal(kinds, want) {
		t.Errorf("%s holds CRDs for %v, want %v (the kinds config/prometheus uses)", dir, kinds, want)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(read(t, filepath.Join(dir, "kustomization.yaml")), &k); err != nil {
		t.Fatal(err)
	}
	sort.Strings(k.Resources)
	if !slices.Equal(k.Resources, files) {
		t.Errorf("%s/kustomization.yaml resources %v, want %v", dir, k.Resources, files)
	}
}
