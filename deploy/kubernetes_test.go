package deploy_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

const k8sDir = "kubernetes"

// kustomization is the part of Kustomize's Kustomization (and Component)
// that the base uses; decoding it strictly makes any other field an error
// here, to be added on purpose.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
}

// serviceMonitor is the part of the Prometheus Operator's ServiceMonitor
// (monitoring.coreos.com/v1, a CRD k8s.io/api does not have) that the
// component and the chart use.
type serviceMonitor struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		// JobLabel names the Service label whose value is the job label;
		// "" makes it the Service's name.
		JobLabel  string               `json:"jobLabel"`
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// manifests are the objects of the base, and those beside it.
type manifests struct {
	base       kustomization
	component  kustomization
	configMap  corev1.ConfigMap
	deployment appsv1.Deployment
	service    corev1.Service
	pdb        policyv1.PodDisruptionBudget
	secret     corev1.Secret // secret.example.yaml
	monitor    serviceMonitor
}

// decodeStrict decodes one YAML document into out; a field out's type does
// not have is an error, so a misspelt or misplaced field cannot pass.
func decodeStrict(data []byte, out any) error {
	if bytes.Contains(data, []byte("\n---")) {
		return fmt.Errorf("more than one document; keep one object per file")
	}
	return yaml.UnmarshalStrict(data, out)
}

// loadManifests decodes every YAML file under deploy/kubernetes by its
// kind, and fails on a file of a kind it does not expect.
func loadManifests(t *testing.T) *manifests {
	t.Helper()
	var m manifests
	seen := map[string]string{}
	err := filepath.WalkDir(k8sDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if ext := filepath.Ext(path); ext != ".yaml" && ext != ".yml" {
			return fmt.Errorf("%s: not YAML; only manifests belong here", path)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(data, &tm); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		var out any
		switch tm.APIVersion + " " + tm.Kind {
		case "kustomize.config.k8s.io/v1beta1 Kustomization":
			out = &m.base
		case "kustomize.config.k8s.io/v1alpha1 Component":
			out = &m.component
		case "v1 ConfigMap":
			out = &m.configMap
		case "apps/v1 Deployment":
			out = &m.deployment
		case "v1 Service":
			out = &m.service
		case "policy/v1 PodDisruptionBudget":
			out = &m.pdb
		case "v1 Secret":
			out = &m.secret
		case "monitoring.coreos.com/v1 ServiceMonitor":
			out = &m.monitor
		default:
			return fmt.Errorf("%s: unexpected %s %s", path, tm.APIVersion, tm.Kind)
		}
		if other, ok := seen[tm.Kind]; ok {
			return fmt.Errorf("%s: a second %s (the first is %s)", path, tm.Kind, other)
		}
		seen[tm.Kind] = path
		if err := decodeStrict(data, out); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"Kustomization", "Component", "ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "Secret", "ServiceMonitor"} {
		if seen[kind] == "" {
			t.Fatalf("no %s under %s", kind, k8sDir)
		}
	}
	return &m
}

// TestManifestsDecodeStrictly proves the decoder refuses what the API
// server would not know, so that the other tests' decoding means something.
func TestManifestsDecodeStrictly(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
	}{
		{"misspelt field", "apiVersion: apps/v1\nkind: Deployment\nspec:\n  replica: 1\n"},
		{"misplaced field", "apiVersion: apps/v1\nkind: Deployment\nspec:\n  template:\n    spec:\n      readOnlyRootFilesystem: true\n"},
		{"duplicate key", "apiVersion: apps/v1\nkind: Deployment\nspec:\n  replicas: 1\n  replicas: 2\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d appsv1.Deployment
			if err := decodeStrict([]byte(tc.yaml), &d); err == nil {
				t.Errorf("decoded without error:\n%s", tc.yaml)
			}
		})
	}
}

// TestKustomization checks that the base lists every manifest beside it
// (and nothing else), that the ServiceMonitor component lists its own, and
// that the base names the image docker/Dockerfile builds.
func TestKustomization(t *testing.T) {
	m := loadManifests(t)
	for _, tc := range []struct {
		dir  string
		k    kustomization
		skip []string // files deliberately not in resources
	}{
		{k8sDir, m.base, []string{"kustomization.yaml", "secret.example.yaml"}},
		{filepath.Join(k8sDir, "servicemonitor"), m.component, []string{"kustomization.yaml"}},
	} {
		entries, err := os.ReadDir(tc.dir)
		if err != nil {
			t.Fatal(err)
		}
		var files []string
		for _, e := range entries {
			if !e.IsDir() && !slices.Contains(tc.skip, e.Name()) {
				files = append(files, e.Name())
			}
		}
		if got := slices.Sorted(slices.Values(tc.k.Resources)); !slices.Equal(got, files) {
			t.Errorf("%s lists resources %v; the manifests there are %v", tc.dir, got, files)
		}
	}
	if n := len(m.base.Images); n != 1 || m.base.Images[0].Name != m.deployment.Spec.Template.Spec.Containers[0].Image {
		t.Errorf("kustomization images %+v do not set the Deployment's image %q", m.base.Images, m.deployment.Spec.Template.Spec.Containers[0].Image)
	}
	dockerfile, err := os.ReadFile("../docker/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(dockerfile, []byte("-t "+m.base.Images[0].NewName+" ")) {
		t.Errorf("the image %q is not the one docker/Dockerfile's usage builds", m.base.Images[0].NewName)
	}
}

// loadedConfig is the relay's configuration as the pod would load it: the
// ConfigMap's file at the path the container's --config names, with the
// Secret's keys as files where the Deployment mounts them, and the
// container's environment.
type loadedConfig struct {
	cfg       *relayConfig
	container corev1.Container
}

func loadPodConfig(t *testing.T, m *manifests) loadedConfig {
	t.Helper()
	pod := m.deployment.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("the pod has %d containers, want the relay alone", len(pod.Containers))
	}
	c := pod.Containers[0]
	i := slices.Index(c.Args, "--config")
	if i < 0 || i+1 >= len(c.Args) || c.Args[0] != "run" {
		t.Fatalf("container args %q do not run the relay with --config", c.Args)
	}
	configPath := c.Args[i+1]

	// Where each volume is mounted, and the files it holds.
	tmp := t.TempDir()
	mounts := map[string]string{} // mount path -> local directory
	for _, vm := range c.VolumeMounts {
		if !vm.ReadOnly {
			t.Errorf("volume %s is mounted writable; the relay only reads", vm.Name)
		}
		vi := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name })
		if vi < 0 {
			t.Fatalf("volume mount %s has no volume", vm.Name)
		}
		v := pod.Volumes[vi]
		files := map[string]string{}
		switch {
		case v.ConfigMap != nil:
			if v.ConfigMap.Name != m.configMap.Name {
				t.Fatalf("volume %s mounts ConfigMap %q; the base has %q", v.Name, v.ConfigMap.Name, m.configMap.Name)
			}
			maps.Copy(files, m.configMap.Data)
		case v.Secret != nil:
			if v.Secret.SecretName != m.secret.Name {
				t.Fatalf("volume %s mounts Secret %q; secret.example.yaml is %q", v.Name, v.Secret.SecretName, m.secret.Name)
			}
			if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode&0o440 != 0o440 || pod.SecurityContext.FSGroup == nil {
				t.Errorf("Secret volume %s: files must be readable by the pod's fsGroup (defaultMode 0440 and an fsGroup), since the relay does not run as root", v.Name)
			}
			maps.Copy(files, m.secret.StringData)
			for k, b := range m.secret.Data {
				files[k] = string(b)
			}
		default:
			t.Fatalf("volume %s is neither a ConfigMap nor a Secret", v.Name)
		}
		dir := filepath.Join(tmp, vm.Name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		mounts[vm.MountPath] = dir
	}
	local := func(path string) string {
		for mp, dir := range mounts {
			if rest, ok := strings.CutPrefix(path, mp+"/"); ok {
				return filepath.Join(dir, rest)
			}
		}
		return ""
	}
	file := local(configPath)
	if file == "" {
		t.Fatalf("--config %s is on no mounted volume", configPath)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("--config %s: the ConfigMap has no such key: %v", configPath, err)
	}
	var raw relayConfig
	if err := yaml.Unmarshal(data, &raw); err != nil {
		t.Fatalf("the ConfigMap's %s: %v", filepath.Base(configPath), err)
	}
	// Every file the configuration names must be mounted.
	for _, p := range []string{raw.Postgres.URLFile, raw.Postgres.PasswordFile, raw.Kafka.SASL.PasswordFile,
		raw.Kafka.TLS.CAFile, raw.Kafka.TLS.CertFile, raw.Kafka.TLS.KeyFile} {
		if p == "" {
			continue
		}
		if l := local(p); l == "" || !fileExists(l) {
			t.Errorf("the configuration reads %s, which no mounted ConfigMap or Secret key provides", p)
		}
	}
	// Load what the pod would: the same file with the mount paths pointing
	// at the local copies.
	cfgFile := filepath.Join(tmp, "config.yaml")
	text := string(data)
	for mp, dir := range mounts {
		text = strings.ReplaceAll(text, mp+"/", dir+"/")
	}
	if err := os.WriteFile(cfgFile, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}

	known := knownEnv()
	var environ []string
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "OUTBOXRELAY_") && !known[e.Name] {
			t.Errorf("container env %s sets no key the relay knows (the relay ignores it)", e.Name)
		}
		if e.ValueFrom != nil {
			continue
		}
		environ = append(environ, e.Name+"="+e.Value)
	}
	cfg, err := dumpConfig(t, cfgFile, environ)
	if err != nil {
		t.Fatalf("the relay would not start with this configuration: %v", err)
	}
	return loadedConfig{cfg: cfg, container: c}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// knownEnv is every environment variable that sets a configuration key,
// from the reference the code generates (docs/configuration.md, which a
// test of the configuration keeps in step).
func knownEnv() map[string]bool {
	ref, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		panic(err)
	}
	known := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `[^`]+` \\| `([A-Z0-9_]+)` \\|").FindAllStringSubmatch(string(ref), -1) {
		known[m[1]] = true
	}
	return known
}

// relayConfig is the part of the relay's configuration these tests read,
// as a file sets it or `outboxrelay config-dump` prints it.
type relayConfig struct {
	Source   string `json:"source"`
	Postgres struct {
		URLFile      string `json:"url_file"`
		PasswordFile string `json:"password_file"`
	} `json:"postgres"`
	Kafka struct {
		SASL struct {
			PasswordFile string `json:"password_file"`
		} `json:"sasl"`
		TLS struct {
			CAFile   string `json:"ca_file"`
			CertFile string `json:"cert_file"`
			KeyFile  string `json:"key_file"`
		} `json:"tls"`
	} `json:"kafka"`
	HTTP struct {
		Listen string `json:"listen"`
	} `json:"http"`
	Shutdown struct {
		Timeout string `json:"timeout"`
	} `json:"shutdown"`
	// Memory is what config-dump's last line allows at these settings.
	Memory memoryNeed `json:"-"`
}

// memoryNeed is the sizing formula's answer (docs/operations.md#memory-sizing).
type memoryNeed struct {
	text                     string
	peak, base, source, sink int64 // bytes
}

func (m memoryNeed) String() string { return m.text }

// dumpConfig loads file with environ alone as the relay would, through
// `outboxrelay config-dump`, which refuses what the relay refuses.
func dumpConfig(t *testing.T, file string, environ []string) (*relayConfig, error) {
	t.Helper()
	cmd := exec.Command(testenv.Binary(t), "config-dump", "--config", file)
	cmd.Env = environ
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%v: %s", err, stderr.Bytes())
	}
	var cfg relayConfig
	if err := yaml.Unmarshal(out, &cfg); err != nil {
		return nil, fmt.Errorf("config-dump printed no YAML: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`(?m)^# memory to allow [^:]*: ((\d+) MiB = base (\d+) MiB \+ 2 × \(source (\d+) MiB \+ sink (\d+) MiB\).*)$`).FindSubmatch(out)
	if m == nil {
		return nil, fmt.Errorf("config-dump gives no memory to allow:\n%s", out)
	}
	mib := func(b []byte) int64 { n, _ := strconv.ParseInt(string(b), 10, 64); return n << 20 }
	cfg.Memory = memoryNeed{text: string(m[1]), peak: mib(m[2]), base: mib(m[3]), source: mib(m[4]), sink: mib(m[5])}
	return &cfg, nil
}

// TestDeploymentMatchesConfig checks the Deployment against the relay's
// configuration as loaded from the ConfigMap: the probes and the Service
// reach http.listen's port on the pod's address, and the grace period
// outlasts the shutdown drain.
func TestDeploymentMatchesConfig(t *testing.T) {
	m := loadManifests(t)
	lc := loadPodConfig(t, m)
	cfg, c := lc.cfg, lc.container
	if len(knownEnv()) < 10 {
		t.Fatalf("read %d environment variables from docs/configuration.md; its table changed shape", len(knownEnv()))
	}

	host, portText, err := net.SplitHostPort(cfg.HTTP.Listen)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" && host != "0.0.0.0" && host != "::" {
		t.Errorf("http.listen %q listens on %s only; the kubelet probes the pod's IP", cfg.HTTP.Listen, host)
	}
	port, _ := strconv.Atoi(portText)
	// containerPort resolves a probe's or Service's port; why says what
	// is wrong when it does not resolve.
	containerPort := func(p intstr.IntOrString) (port int, why string) {
		if p.Type == intstr.Int {
			return p.IntValue(), ""
		}
		for _, cp := range c.Ports {
			if cp.Name == p.StrVal {
				return int(cp.ContainerPort), ""
			}
		}
		return 0, fmt.Sprintf(" (no container port is named %q)", p.StrVal)
	}
	for _, pr := range []struct {
		what  string
		probe *corev1.Probe
		path  string
	}{
		{"liveness", c.LivenessProbe, "/healthz"},
		{"readiness", c.ReadinessProbe, "/readyz"},
	} {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			t.Errorf("no %s probe with httpGet", pr.what)
			continue
		}
		if pr.probe.HTTPGet.Path != pr.path {
			t.Errorf("%s probe path %q, want %s", pr.what, pr.probe.HTTPGet.Path, pr.path)
		}
		if got, why := containerPort(pr.probe.HTTPGet.Port); got != port {
			t.Errorf("%s probe port %s is %d%s; http.listen is %q", pr.what, pr.probe.HTTPGet.Port.String(), got, why, cfg.HTTP.Listen)
		}
		// A probe that times out fails; the relay's checks are bounded by
		// 2s (metrics.probeTimeout) each.
		if pr.probe.TimeoutSeconds < 3 {
			t.Errorf("%s probe timeoutSeconds %d is shorter than the relay's own checks may take (2s)", pr.what, pr.probe.TimeoutSeconds)
		}
	}
	if len(m.service.Spec.Ports) != 1 {
		t.Fatalf("the Service has %d ports, want the http one", len(m.service.Spec.Ports))
	}
	sp := m.service.Spec.Ports[0]
	if got, why := containerPort(sp.TargetPort); got != port {
		t.Errorf("Service targetPort %s is %d%s; http.listen is %q", sp.TargetPort.String(), got, why, cfg.HTTP.Listen)
	}

	shutdown, err := time.ParseDuration(cfg.Shutdown.Timeout)
	if err != nil {
		t.Fatalf("shutdown.timeout %q: %v", cfg.Shutdown.Timeout, err)
	}
	grace := m.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds
	// After the drain the relay still confirms the checkpoint to
	// PostgreSQL and closes its connections: leave it a few seconds.
	const margin = 5 * time.Second
	switch {
	case grace == nil:
		t.Errorf("terminationGracePeriodSeconds is not set; the default 30s is not above shutdown.timeout (%s) + %s", shutdown, margin)
	case time.Duration(*grace)*time.Second < shutdown+margin:
		t.Errorf("terminationGracePeriodSeconds %d is not at least shutdown.timeout (%s) + %s", *grace, shutdown, margin)
	}
}

// TestDeploymentHardening checks what the base promises about the pod:
// an active and a standby replica, rolled one at a time, non-root
// on a read-only root filesystem, with its memory bounded.
func TestDeploymentHardening(t *testing.T) {
	m := loadManifests(t)
	d := m.deployment
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %v; want two, one active and one standby", d.Spec.Replicas)
	}
	ru := d.Spec.Strategy.RollingUpdate
	if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil ||
		ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 0 || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 1 {
		t.Errorf("strategy %+v: want a rolling update one pod at a time and no third pod (maxSurge 0, maxUnavailable 1)", d.Spec.Strategy)
	}
	psc, csc := pod.SecurityContext, c.SecurityContext
	switch {
	case psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot:
		t.Error("the pod does not set runAsNonRoot")
	case psc.RunAsUser == nil || *psc.RunAsUser == 0:
		t.Error("the pod does not run as a non-root user id")
	}
	switch {
	case csc == nil:
		t.Error("the container has no securityContext")
	case csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem:
		t.Error("the root filesystem is writable")
	case csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation:
		t.Error("privilege escalation is allowed")
	case csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL"):
		t.Error("capabilities are not all dropped")
	}
	req, lim := c.Resources.Requests.Memory(), c.Resources.Limits.Memory()
	// docs/performance.md: 30-37 MiB peak RSS at the default settings.
	peak := resource.MustParse("37Mi")
	switch {
	case req.IsZero() || lim.IsZero():
		t.Errorf("memory request %s and limit %s must both be set", req, lim)
	case req.Cmp(peak) < 0:
		t.Errorf("memory request %s is below the measured peak of %s", req, &peak)
	case lim.Cmp(*req) < 0:
		t.Errorf("memory limit %s is below the request %s", lim, req)
	}
	if soft, from, err := softMemoryLimit(c); err != nil {
		t.Error(err)
	} else if soft >= lim.Value() {
		t.Errorf("the Go runtime's soft memory limit of %d MiB (%s) is not below the memory limit %s", soft>>20, from, lim)
	}
}

// relayMemoryLimitRatio is the share of the container's memory limit the
// relay makes the Go runtime's soft limit when GOMEMLIMIT is not set
// (memoryLimitRatio, cmd/outboxrelay/internal/app/memlimit.go).
const relayMemoryLimitRatio = 0.9

// softMemoryLimit is the Go runtime's soft memory limit in c, in bytes,
// and where it comes from: GOMEMLIMIT when the container sets it, else
// what the relay takes from the container's memory limit.
func softMemoryLimit(c corev1.Container) (int64, string, error) {
	for _, e := range c.Env {
		if e.Name != "GOMEMLIMIT" {
			continue
		}
		soft, err := resource.ParseQuantity(strings.TrimSuffix(e.Value, "B"))
		if err != nil {
			return 0, "", fmt.Errorf("GOMEMLIMIT %q: %v", e.Value, err)
		}
		return soft.Value(), "GOMEMLIMIT=" + e.Value, nil
	}
	lim := c.Resources.Limits.Memory()
	return int64(float64(lim.Value()) * relayMemoryLimitRatio), fmt.Sprintf("%g of the container's %s", relayMemoryLimitRatio, lim), nil
}

// TestDeploymentMemoryLimit holds the container's memory limit to the
// sizing formula (docs/operations.md#memory-sizing, config.Memory) for the
// ConfigMap's configuration, at its kafka.max_record_bytes or the brokers'
// default limit, so that raising a buffer or the record limit in one
// without the other fails here rather than in an OOM kill. The runtime's
// soft limit (GOMEMLIMIT, or 90% of the container's) must leave room for
// what may be live, or the collector would run without end.
func TestDeploymentMemoryLimit(t *testing.T) {
	m := loadManifests(t)
	lc := loadPodConfig(t, m)
	need := lc.cfg.Memory
	lim := lc.container.Resources.Limits.Memory()
	if lim.IsZero() {
		t.Fatal("the container has no memory limit")
	}
	if lim.Value() < need.peak {
		t.Errorf("memory limit %s is below the %s that docs/operations.md#memory-sizing gives for the ConfigMap's configuration (source %s): raise the limit, or lower the buffers",
			lim, need, lc.cfg.Source)
	}
	soft, from, err := softMemoryLimit(lc.container)
	if err != nil {
		t.Fatal(err)
	}
	if live := need.base + need.source + need.sink; soft < live {
		t.Errorf("the Go runtime's soft memory limit of %d MiB (%s) is below the %d MiB the relay may have in use (base and live parts of %s)", soft>>20, from, live>>20, need)
	}
	t.Logf("memory limit %s; the formula asks %s", lim, need)
}

// TestSelectors checks that the Deployment, the Service, the
// PodDisruptionBudget and the ServiceMonitor find what they are meant to.
func TestSelectors(t *testing.T) {
	m := loadManifests(t)
	podLabels := m.deployment.Spec.Template.Labels
	matches := func(what string, sel map[string]string, labels map[string]string) {
		t.Helper()
		if len(sel) == 0 {
			t.Errorf("%s selects everything", what)
		}
		for k, v := range sel {
			if labels[k] != v {
				t.Errorf("%s selects %s=%s, which the target's labels %v do not have", what, k, v, labels)
			}
		}
	}
	matches("the Deployment", m.deployment.Spec.Selector.MatchLabels, podLabels)
	matches("the Service", m.service.Spec.Selector, podLabels)
	matches("the PodDisruptionBudget", m.pdb.Spec.Selector.MatchLabels, podLabels)
	matches("the ServiceMonitor", m.monitor.Spec.Selector.MatchLabels, m.service.Labels)
	for _, s := range []*metav1.LabelSelector{m.deployment.Spec.Selector, m.pdb.Spec.Selector, &m.monitor.Spec.Selector} {
		if len(s.MatchExpressions) > 0 {
			t.Errorf("selector %v has matchExpressions, which this test does not read", s)
		}
	}
	// One replica: a PDB that kept it running would block every node drain.
	if mu := m.pdb.Spec.MaxUnavailable; mu == nil || mu.IntValue() < 1 || m.pdb.Spec.MinAvailable != nil {
		t.Errorf("PodDisruptionBudget maxUnavailable %v, minAvailable %v: with one replica it must allow one eviction", mu, m.pdb.Spec.MinAvailable)
	}
	if len(m.monitor.Spec.Endpoints) != 1 {
		t.Fatalf("the ServiceMonitor has %d endpoints, want one", len(m.monitor.Spec.Endpoints))
	}
	ep := m.monitor.Spec.Endpoints[0]
	if ep.Port != m.service.Spec.Ports[0].Name || ep.Path != "/metrics" {
		t.Errorf("the ServiceMonitor scrapes port %q path %q; the Service's port is %q and the relay serves /metrics", ep.Port, ep.Path, m.service.Spec.Ports[0].Name)
	}
	// The alert rules select job="outboxrelay", which the Prometheus
	// Operator takes from the Service's name.
	if m.service.Name != "outboxrelay" {
		t.Errorf("the Service is %q; the alerts select job=\"outboxrelay\", its name", m.service.Name)
	}
}

// TestKustomizeBuild builds the base, and the overlay docs/kubernetes.md
// shows (the ServiceMonitor component, an image, a configuration), with
// kubectl's kustomize as a user would, and decodes what comes out
// strictly, the overlay's configuration with the relay's parser. It skips
// without kubectl.
func TestKustomizeBuild(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not installed: the build with kustomize is not checked")
	}
	base, err := filepath.Abs(k8sDir)
	if err != nil {
		t.Fatal(err)
	}
	// The doc's overlay is overlays/prod beside deploy/ in the repository.
	doc, err := os.ReadFile("../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)\\n   ```yaml\\n   # overlays/prod/kustomization.yaml\\n(.*?)\\n   ```\\n").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/kubernetes.md has no overlays/prod/kustomization.yaml example")
	}
	root := t.TempDir()
	overlay := filepath.Join(root, "overlays", "prod")
	if err := os.MkdirAll(overlay, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(base), filepath.Join(root, "deploy")); err != nil {
		t.Fatal(err)
	}
	example := regexp.MustCompile("(?m)^   ").ReplaceAll(m[1], nil)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), example, 0o600); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		dir   string
		kinds []string
		image string
	}{
		{base, []string{"ConfigMap", "Deployment", "PodDisruptionBudget", "Service"}, "outboxrelay:latest"},
		{overlay, []string{"ConfigMap", "Deployment", "PodDisruptionBudget", "Service", "ServiceMonitor"}, "registry.example.com/outboxrelay:v1.2.3"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := exec.CommandContext(ctx, kubectl, "kustomize", tc.dir).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v\n%s", tc.dir, err, out)
		}
		var kinds []string
		for doc := range strings.SplitSeq(string(out), "\n---\n") {
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatal(err)
			}
			kinds = append(kinds, tm.Kind)
			switch tm.Kind {
			case "Deployment":
				var d appsv1.Deployment
				if err := decodeStrict([]byte(doc), &d); err != nil {
					t.Fatalf("the built Deployment: %v", err)
				}
				if got := d.Spec.Template.Spec.Containers[0].Image; got != tc.image {
					t.Errorf("kustomize %s: image %q, want %q", tc.dir, got, tc.image)
				}
			case "ConfigMap":
				var cm corev1.ConfigMap
				if err := decodeStrict([]byte(doc), &cm); err != nil {
					t.Fatalf("the built ConfigMap: %v", err)
				}
				// The Secret's files, as docs/kubernetes.md creates them,
				// where the configuration reads them.
				secrets := t.TempDir()
				ca, err := os.ReadFile(testenv.NewCerts(t).CAFile)
				if err != nil {
					t.Fatal(err)
				}
				for name, content := range map[string][]byte{"postgres-password": []byte("pw"), "postgres-ca.pem": ca} {
					if err := os.WriteFile(filepath.Join(secrets, name), content, 0o600); err != nil {
						t.Fatal(err)
					}
				}
				text := strings.ReplaceAll(cm.Data["config.yaml"], "/var/run/secrets/outboxrelay/", secrets+"/")
				file := filepath.Join(t.TempDir(), "config.yaml")
				if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
					t.Fatal(err)
				}
				if _, err := dumpConfig(t, file, nil); err != nil {
					t.Errorf("kustomize %s: the configuration: %v", tc.dir, err)
				}
			}
		}
		slices.Sort(kinds)
		if !slices.Equal(kinds, tc.kinds) {
			t.Errorf("kustomize %s built %v, want %v", tc.dir, kinds, tc.kinds)
		}
	}
}
