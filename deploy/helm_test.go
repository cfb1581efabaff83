package deploy_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	yamlv3 "gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

const (
	chartDir        = "helm/outboxrelay"
	chartAlertsFile = chartDir + "/files/alerts.yaml"
	// chartKubeVersion is the cluster version the tests render for: helm
	// built without its release flags (a plain go install) assumes 1.20,
	// which the chart's kubeVersion refuses.
	chartKubeVersion = "1.30.0"
)

// helmBin is the helm on PATH, or skips the test: scripts/test installs the
// pinned one into its tool cache and puts it there.
func helmBin(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("helm")
	if err != nil {
		t.Skip("helm is not on PATH, so the chart is not linted or rendered here: OUTBOXRELAY_TEST_TOOLS=build scripts/test builds helm v3.22.0 " +
			"(go install helm.sh/helm/v3/cmd/helm@v3.22.0) into its tool cache")
	}
	return bin
}

// runHelm runs helm with args and values (a values file, when not empty),
// returning its standard output, or an error with its standard error.
func runHelm(t *testing.T, values string, args ...string) ([]byte, error) {
	t.Helper()
	bin := helmBin(t)
	if values != "" {
		file := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(file, []byte(values), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--values", file)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return out, nil
}

// prometheusRule is the Prometheus Operator's PrometheusRule (a CRD
// k8s.io/api does not have), its spec a rule file.
type prometheusRule struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec ruleFile `yaml:"spec"`
}

// chart is what helm template rendered, decoded as the base's manifests
// are, with the kinds in the order rendered.
type chart struct {
	manifests
	rule  prometheusRule
	kinds []string
}

// renderChart renders the chart as release with values, and decodes every
// object strictly into its Kubernetes type.
func renderChart(t *testing.T, release, values string) *chart {
	t.Helper()
	out, err := runHelm(t, values, "template", release, chartDir, "--namespace", "shop", "--kube-version", chartKubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	var c chart
	for doc := range strings.SplitSeq(string(out), "\n---\n") {
		doc = strings.TrimPrefix(doc, "---\n")
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("helm template printed a document that is no YAML: %v\n%s", err, doc)
		}
		if tm.Kind == "" {
			continue
		}
		if slices.Contains(c.kinds, tm.Kind) {
			t.Fatalf("the chart renders a second %s", tm.Kind)
		}
		c.kinds = append(c.kinds, tm.Kind)
		if err := c.decode(tm, []byte(doc)); err != nil {
			t.Fatalf("the chart's %s: %v\n%s", tm.Kind, err, doc)
		}
	}
	slices.Sort(c.kinds)
	return &c
}

func (c *chart) decode(tm metav1.TypeMeta, doc []byte) error {
	var out any
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 ConfigMap":
		out = &c.configMap
	case "apps/v1 Deployment":
		out = &c.deployment
	case "v1 Service":
		out = &c.service
	case "policy/v1 PodDisruptionBudget":
		out = &c.pdb
	case "monitoring.coreos.com/v1 ServiceMonitor":
		out = &c.monitor
	case "monitoring.coreos.com/v1 PrometheusRule":
		dec := yamlv3.NewDecoder(bytes.NewReader(doc))
		dec.KnownFields(true)
		return dec.Decode(&c.rule)
	default:
		return fmt.Errorf("unexpected %s %s", tm.APIVersion, tm.Kind)
	}
	return decodeStrict(doc, out)
}

// same reports, with both sides, where got is not semantically want (a
// quantity equal in value, however written, is the same).
func same(t *testing.T, what string, got, want any) {
	t.Helper()
	if equality.Semantic.DeepEqual(got, want) {
		return
	}
	g, _ := yaml.Marshal(got)
	w, _ := yaml.Marshal(want)
	t.Errorf("%s: the chart renders\n%s\nthe Kustomize base has\n%s", what, g, w)
}

// TestHelmLint is helm's own lint of the chart, strict (warnings fail),
// with the defaults and with every optional object rendered.
func TestHelmLint(t *testing.T) {
	helmBin(t)
	for _, tc := range []struct{ name, values string }{
		{"defaults", ""},
		{"everything on", "serviceMonitor: {enabled: true}\nprometheusRule: {enabled: true}\n" +
			"secrets: {extra: [{secretName: kafka-tls, mountPath: /var/run/secrets/outboxrelay-kafka}]}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runHelm(t, tc.values, "lint", "--strict", "--kube-version", chartKubeVersion, chartDir)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s", out)
		})
	}
}

// TestHelmChartMatchesKustomize renders the chart with its defaults as
// release "outboxrelay" and holds what it renders equal to the Kustomize
// base, so that the two cannot drift: the Deployment's spec whole, the
// image and the labels aside; the Service's and the PodDisruptionBudget's;
// the configuration; the ServiceMonitor's endpoint. The configuration then
// loads with the relay, from the files the pod would have.
func TestHelmChartMatchesKustomize(t *testing.T) {
	base := loadManifests(t)
	c := renderChart(t, "outboxrelay", "serviceMonitor: {enabled: true}\nprometheusRule: {enabled: true}\n")
	want := []string{"ConfigMap", "Deployment", "PodDisruptionBudget", "PrometheusRule", "Service", "ServiceMonitor"}
	if !slices.Equal(c.kinds, want) {
		t.Fatalf("the chart renders %v, want %v", c.kinds, want)
	}
	for _, o := range []struct{ kind, got, want string }{
		{"ConfigMap", c.configMap.Name, base.configMap.Name},
		{"Deployment", c.deployment.Name, base.deployment.Name},
		{"Service", c.service.Name, base.service.Name},
		{"PodDisruptionBudget", c.pdb.Name, base.pdb.Name},
		{"ServiceMonitor", c.monitor.Metadata.Name, base.monitor.Metadata.Name},
	} {
		if o.got != o.want {
			t.Errorf("the chart's %s is %q, the base's %q", o.kind, o.got, o.want)
		}
	}

	compareDeployments(t, c.deployment, base.deployment)
	checkChartSelectors(t, &c.manifests)
	cs, bs := c.service.Spec, base.service.Spec
	cs.Selector, bs.Selector = nil, nil
	same(t, "the Service's spec", cs, bs)
	cp, bp := c.pdb.Spec, base.pdb.Spec
	cp.Selector, bp.Selector = nil, nil
	same(t, "the PodDisruptionBudget's spec", cp, bp)

	var cfg, baseCfg map[string]any
	if err := yaml.Unmarshal([]byte(c.configMap.Data["config.yaml"]), &cfg); err != nil {
		t.Fatalf("the chart's config.yaml: %v", err)
	}
	if err := yaml.Unmarshal([]byte(base.configMap.Data["config.yaml"]), &baseCfg); err != nil {
		t.Fatal(err)
	}
	same(t, "the configuration (values' config)", cfg, baseCfg)
	if keys := slices.Sorted(maps.Keys(c.configMap.Data)); !slices.Equal(keys, []string{"config.yaml"}) {
		t.Errorf("the chart's ConfigMap has keys %v, want config.yaml alone", keys)
	}
	// The relay loads it, as the pod would: the base's example Secret is
	// the one the chart mounts by default.
	pod := manifests{configMap: c.configMap, deployment: c.deployment, secret: base.secret}
	loadPodConfig(t, &pod)

	same(t, "the ServiceMonitor's endpoints", c.monitor.Spec.Endpoints, base.monitor.Spec.Endpoints)
	checkChartRules(t, c.rule)
}

// compareDeployments holds the chart's Deployment to the base's: the
// fields a reader looks for one by one, for a clear message, then the
// whole spec, so that a field added to the base alone fails here too. The
// image, the labels and the pod's annotations (the configuration's
// checksum) are the chart's own.
func compareDeployments(t *testing.T, got, want appsv1.Deployment) {
	t.Helper()
	gp, wp := got.Spec.Template.Spec, want.Spec.Template.Spec
	if len(gp.Containers) != 1 || len(wp.Containers) != 1 {
		t.Fatalf("the chart's pod has %d containers, the base's %d; want the relay alone", len(gp.Containers), len(wp.Containers))
	}
	gc, wc := gp.Containers[0], wp.Containers[0]
	for _, f := range []struct {
		what      string
		got, want any
	}{
		{"replicas", got.Spec.Replicas, want.Spec.Replicas},
		{"strategy", got.Spec.Strategy, want.Spec.Strategy},
		{"terminationGracePeriodSeconds", gp.TerminationGracePeriodSeconds, wp.TerminationGracePeriodSeconds},
		{"the pod's securityContext", gp.SecurityContext, wp.SecurityContext},
		{"the container's securityContext", gc.SecurityContext, wc.SecurityContext},
		{"resources", gc.Resources, wc.Resources},
		{"env (GOMEMLIMIT)", gc.Env, wc.Env},
		{"livenessProbe", gc.LivenessProbe, wc.LivenessProbe},
		{"readinessProbe", gc.ReadinessProbe, wc.ReadinessProbe},
		{"args", gc.Args, wc.Args},
		{"ports", gc.Ports, wc.Ports},
		{"volumeMounts", gc.VolumeMounts, wc.VolumeMounts},
		{"volumes", gp.Volumes, wp.Volumes},
	} {
		same(t, f.what, f.got, f.want)
	}
	if !strings.HasPrefix(gc.Image, "ghcr.io/outboxrelay/outboxrelay:") {
		t.Errorf("the chart's image is %q, want the released ghcr.io/outboxrelay/outboxrelay", gc.Image)
	}
	gs, ws := *got.Spec.DeepCopy(), *want.Spec.DeepCopy()
	for _, s := range []*appsv1.DeploymentSpec{&gs, &ws} {
		s.Selector = nil
		s.Template.ObjectMeta = metav1.ObjectMeta{}
		s.Template.Spec.Containers[0].Image = ""
	}
	same(t, "the Deployment's spec (selector, pod metadata and image aside)", gs, ws)
}

// checkChartSelectors checks that the Deployment, the Service and the
// PodDisruptionBudget select the chart's pods (and the same labels each),
// and the ServiceMonitor its Service, with the job label the alert rules
// select: the Service's app.kubernetes.io/name, whatever the release's
// name.
func checkChartSelectors(t *testing.T, m *manifests) {
	t.Helper()
	pod := m.deployment.Spec.Template.Labels
	sel := m.deployment.Spec.Selector.MatchLabels
	if len(sel) == 0 || len(m.deployment.Spec.Selector.MatchExpressions) > 0 {
		t.Errorf("the Deployment selects %v; want labels alone", m.deployment.Spec.Selector)
	}
	for k, v := range sel {
		if pod[k] != v {
			t.Errorf("the Deployment selects %s=%s, which its pods' labels %v do not have", k, v, pod)
		}
	}
	if !reflect.DeepEqual(m.service.Spec.Selector, sel) {
		t.Errorf("the Service selects %v, the Deployment %v", m.service.Spec.Selector, sel)
	}
	if m.pdb.Name != "" && !reflect.DeepEqual(m.pdb.Spec.Selector.MatchLabels, sel) {
		t.Errorf("the PodDisruptionBudget selects %v, the Deployment %v", m.pdb.Spec.Selector, sel)
	}
	if m.monitor.Metadata.Name == "" {
		return
	}
	for k, v := range m.monitor.Spec.Selector.MatchLabels {
		if m.service.Labels[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s, which the Service's labels %v do not have", k, v, m.service.Labels)
		}
	}
	if job := m.service.Labels[m.monitor.Spec.JobLabel]; m.monitor.Spec.JobLabel == "" || job != "outboxrelay" {
		t.Errorf("the ServiceMonitor's jobLabel %q gives job %q; the alert rules select job=\"outboxrelay\"", m.monitor.Spec.JobLabel, job)
	}
}

// checkChartRules holds the PrometheusRule's groups equal to
// deploy/prometheus/alerts.yaml, the rules promtool checks and tests.
func checkChartRules(t *testing.T, got prometheusRule) {
	t.Helper()
	data, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var want ruleFile
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&want); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	if len(want.Groups) == 0 {
		t.Fatalf("%s has no groups", alertsFile)
	}
	if !reflect.DeepEqual(got.Spec, want) {
		t.Errorf("the PrometheusRule's groups are not those of %s:\n%+v\nwant\n%+v", alertsFile, got.Spec, want)
	}
}

// TestHelmAlertsCopy holds the chart's copy of the alert rules (a chart
// reads only files inside it) byte for byte equal to the ones promtool
// checks.
func TestHelmAlertsCopy(t *testing.T) {
	orig, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := os.ReadFile(chartAlertsFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(orig, cp) {
		t.Errorf("%s differs from %s: cp deploy/%s deploy/%s", chartAlertsFile, alertsFile, alertsFile, chartAlertsFile)
	}
}

// TestHelmChartValues renders the chart with what a platform team sets,
// as a release of another name, and checks that each value lands where
// the pod reads it.
func TestHelmChartValues(t *testing.T) {
	const values = `
image: {tag: v9.9.9}
replicaCount: 3
config:
  source: poll
  cdc: null
  http: {listen: ":9090"}
secrets:
  existingSecret: shop-relay
  extra: [{secretName: kafka-tls, mountPath: /var/run/secrets/outboxrelay-kafka}]
extraEnv: [{name: OUTBOXRELAY_LOG_LEVEL, value: debug}]
goMemLimit: 400MiB
podDisruptionBudget: {enabled: false}
serviceMonitor: {enabled: true, labels: {release: prometheus}}
`
	c := renderChart(t, "shop", values)
	if want := []string{"ConfigMap", "Deployment", "Service", "ServiceMonitor"}; !slices.Equal(c.kinds, want) {
		t.Fatalf("the chart renders %v, want %v", c.kinds, want)
	}
	d := c.deployment
	if d.Name != "outboxrelay-shop" || c.configMap.Name != d.Name || c.service.Name != d.Name {
		t.Errorf("objects named %q, %q, %q; want outboxrelay-shop", d.Name, c.configMap.Name, c.service.Name)
	}
	// The pods of the Deployment are named after it, and the alert on
	// their readiness must match them.
	if re := notReadyPods(t); !re.MatchString(d.Name + "-5d4f7c9b8-x2x7q") {
		t.Errorf("OutboxRelayNotReady matches pods %s, which misses those of Deployment %s", re, d.Name)
	}
	checkChartSelectors(t, &c.manifests)
	if c.monitor.Metadata.Labels["release"] != "prometheus" {
		t.Errorf("the ServiceMonitor's labels %v lack serviceMonitor.labels", c.monitor.Metadata.Labels)
	}
	pod := d.Spec.Template.Spec
	ctr := pod.Containers[0]
	if *d.Spec.Replicas != 3 || ctr.Image != "ghcr.io/outboxrelay/outboxrelay:v9.9.9" {
		t.Errorf("replicas %d, image %q; want 3 and the tag set", *d.Spec.Replicas, ctr.Image)
	}
	if len(ctr.Ports) != 1 || ctr.Ports[0].Name != "http" || ctr.Ports[0].ContainerPort != 9090 {
		t.Errorf("container ports %+v; want http on 9090, the port of config.http.listen", ctr.Ports)
	}
	if !slices.ContainsFunc(ctr.Env, func(e corev1.EnvVar) bool { return e.Name == "OUTBOXRELAY_LOG_LEVEL" }) ||
		!slices.ContainsFunc(ctr.Env, func(e corev1.EnvVar) bool { return e.Name == "GOMEMLIMIT" }) {
		t.Errorf("env %+v; want GOMEMLIMIT and extraEnv's", ctr.Env)
	}
	checkSecretVolumes(t, pod, map[string]string{
		"/var/run/secrets/outboxrelay":       "shop-relay",
		"/var/run/secrets/outboxrelay-kafka": "kafka-tls",
	})
	// The configuration loads with the relay, from the Secret given
	// (loadPodConfig knows one Secret: the extra one is checked above).
	secret := loadManifests(t).secret
	secret.Name = "shop-relay"
	one := *d.DeepCopy()
	ps := &one.Spec.Template.Spec
	ps.Volumes = slices.DeleteFunc(ps.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName != secret.Name })
	ps.Containers[0].VolumeMounts = slices.DeleteFunc(ps.Containers[0].VolumeMounts, func(vm corev1.VolumeMount) bool {
		return !slices.ContainsFunc(ps.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name })
	})
	loadPodConfig(t, &manifests{configMap: c.configMap, deployment: one, secret: secret})

	// A changed configuration rolls the pods.
	other := renderChart(t, "shop", strings.Replace(values, "source: poll", "source: poll\n  log: {level: warn}", 1))
	sum := func(c *chart) string { return c.deployment.Spec.Template.Annotations["checksum/config"] }
	if sum(c) == "" || sum(c) == sum(other) {
		t.Errorf("checksum/config %q, and %q with another configuration: a change would not roll the pods", sum(c), sum(other))
	}
}

// notReadyPods is the pod name pattern OutboxRelayNotReady matches.
func notReadyPods(t *testing.T) *regexp.Regexp {
	t.Helper()
	for _, a := range loadAlerts(t) {
		if a.Alert != "OutboxRelayNotReady" {
			continue
		}
		m := regexp.MustCompile(`pod=~"([^"]+)"`).FindStringSubmatch(a.Expr)
		if m == nil {
			t.Fatalf("OutboxRelayNotReady's expr %q selects no pod=~", a.Expr)
		}
		return regexp.MustCompile("^(?:" + m[1] + ")$")
	}
	t.Fatal("no alert OutboxRelayNotReady")
	return nil
}

// checkSecretVolumes checks that the Secrets mounted are those of want
// (mount path to Secret), each read-only and readable by the pod's
// fsGroup alone.
func checkSecretVolumes(t *testing.T, pod corev1.PodSpec, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for _, vm := range pod.Containers[0].VolumeMounts {
		i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name })
		if i < 0 {
			t.Errorf("volume mount %s has no volume", vm.Name)
			continue
		}
		v := pod.Volumes[i]
		if v.Secret == nil {
			continue
		}
		got[vm.MountPath] = v.Secret.SecretName
		if !vm.ReadOnly || v.Secret.DefaultMode == nil || *v.Secret.DefaultMode != 0o440 {
			t.Errorf("Secret %s at %s: read-only %v, mode %v; want read-only, 0440", v.Secret.SecretName, vm.MountPath, vm.ReadOnly, v.Secret.DefaultMode)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Secrets mounted %v, want %v", got, want)
	}
}

// TestHelmValuesSchema checks that values.schema.json refuses, with the
// value's path, what would render a relay that cannot work, and a value
// the chart does not know.
func TestHelmValuesSchema(t *testing.T) {
	helmBin(t)
	for _, tc := range []struct{ name, values, want string }{
		{"unknown value", "replicas: 3\n", "'replicas' not allowed"},
		{"misplaced value", "image: {name: outboxrelay}\n", "'name' not allowed"},
		{"no replica", "replicaCount: 0\n", "/replicaCount"},
		{"listen without a port", "config: {http: {listen: \"0.0.0.0\"}}\n", "/config/http/listen"},
		{"no eviction allowed", "podDisruptionBudget: {maxUnavailable: 0}\n", "/podDisruptionBudget/maxUnavailable"},
		{"a name the alerts miss", "fullnameOverride: relay\n", "/fullnameOverride"},
		{"a relative mount", "secrets: {extra: [{secretName: s, mountPath: secrets}]}\n", "/secrets/extra/0/mountPath"},
		{"a pull policy Kubernetes has not", "image: {pullPolicy: Sometimes}\n", "/image/pullPolicy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runHelm(t, tc.values, "template", "outboxrelay", chartDir, "--kube-version", chartKubeVersion)
			if err == nil {
				t.Fatalf("helm template rendered with\n%s", tc.values)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("the error does not name %q: %v", tc.want, err)
			}
		})
	}
}

// TestHelmDocsExample renders the values docs/kubernetes.md shows, and
// loads the configuration they give with the relay, from the Secret the
// page creates.
func TestHelmDocsExample(t *testing.T) {
	doc, err := os.ReadFile("../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)\\n   ```yaml\\n   # values-shop.yaml\\n(.*?)\\n   ```\\n").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/kubernetes.md has no values-shop.yaml example")
	}
	values := regexp.MustCompile("(?m)^   ").ReplaceAll(m[1], nil)
	c := renderChart(t, "outboxrelay", string(values))
	if !slices.Contains(c.kinds, "ServiceMonitor") {
		t.Errorf("the example renders %v, without the ServiceMonitor it enables", c.kinds)
	}
	ca, err := os.ReadFile(testenv.NewCerts(t).CAFile)
	if err != nil {
		t.Fatal(err)
	}
	secret := corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "outboxrelay"},
		StringData: map[string]string{"postgres-password": "pw", "postgres-ca.pem": string(ca)}}
	loadPodConfig(t, &manifests{configMap: c.configMap, deployment: c.deployment, secret: secret})
}

// TestHelmValuesDocumented checks that docs/kubernetes.md's table names
// every value of values.yaml: each top-level key, and the keys inside
// those that group settings of the chart's own.
func TestHelmValuesDocumented(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yamlv3.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	// Maps passed through whole, whose keys are the relay's or
	// Kubernetes' own.
	whole := []string{"config", "resources", "podSecurityContext", "securityContext", "podAnnotations", "podLabels", "nodeSelector", "affinity"}
	for _, k := range slices.Sorted(maps.Keys(values)) {
		names := []string{k}
		if sub, ok := values[k].(map[string]any); ok && !slices.Contains(whole, k) {
			names = nil
			for _, s := range slices.Sorted(maps.Keys(sub)) {
				names = append(names, k+"."+s)
			}
		}
		for _, n := range names {
			if !bytes.Contains(doc, []byte("| `"+n+"`")) && !bytes.Contains(doc, []byte(", `"+n+"`")) {
				t.Errorf("docs/kubernetes.md's table of values does not name %s", n)
			}
		}
	}
}
