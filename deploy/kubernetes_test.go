// Package deploy holds what toolsvc is deployed with — the Kubernetes
// kustomize base and overlay, the local observability stack for Docker
// Compose, the Grafana dashboard and the Prometheus alert rules — and the
// tests that keep them honest: Kubernetes manifests are rendered with
// kustomize and decoded strictly into the upstream API types, the memory
// the base allows adds up, every metric the dashboard and alerts query
// must be one the service exposes, and the runtime image the Dockerfile
// describes is built and run with podman (container_test.go).
package deploy

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/toolsvc/toolsvc/internal/config"
	"github.com/toolsvc/toolsvc/internal/policy"
)

// newObject returns an empty object of the upstream API type for
// apiVersion and kind, or nil for a type the manifests should not hold.
func newObject(apiVersion, kind string) any {
	switch apiVersion + " " + kind {
	case "v1 ServiceAccount":
		return &corev1.ServiceAccount{}
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}
	case "v1 Secret":
		return &corev1.Secret{}
	case "v1 Service":
		return &corev1.Service{}
	case "v1 PersistentVolumeClaim":
		return &corev1.PersistentVolumeClaim{}
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	case "networking.k8s.io/v1 NetworkPolicy":
		return &networkingv1.NetworkPolicy{}
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}
	}
	return nil
}

// decodeStrict decodes one manifest into its upstream type, refusing
// unknown (for example misspelt) fields.
func decodeStrict(doc []byte) (any, error) {
	var head metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return nil, err
	}
	obj := newObject(head.APIVersion, head.Kind)
	if obj == nil {
		return nil, fmt.Errorf("unexpected %s %s", head.APIVersion, head.Kind)
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", head.Kind, err)
	}
	return obj, nil
}

// manifests is a rendered kustomization, by kind and name.
type manifests map[string]any

func (m manifests) get(kind, name string) any { return m[kind+"/"+name] }

// render builds the kustomization in dir as kubectl kustomize does, and
// decodes every object strictly.
func render(t *testing.T, dir string) manifests {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	out := manifests{}
	for _, r := range resMap.Resources() {
		doc, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		obj, err := decodeStrict(doc)
		if err != nil {
			t.Errorf("%s: %s/%s: %v", dir, r.GetKind(), r.GetName(), err)
			continue
		}
		out[r.GetKind()+"/"+r.GetName()] = obj
	}
	return out
}

// TestManifestFilesDecodeStrictly decodes every manifest and patch file as
// it is written, so a misspelt field fails even in a patch.
func TestManifestFilesDecodeStrictly(t *testing.T) {
	files, _ := filepath.Glob("kubernetes/*/*.yaml")
	more, _ := filepath.Glob("kubernetes/overlays/*/*.yaml")
	files = append(files, more...)
	n := 0
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeStrict(b); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		n++
	}
	if n < 12 {
		t.Errorf("only %d manifest files found", n)
	}
}

// TestStrictnessHasTeeth shows the checks catch a misspelt field, in a
// manifest and in a kustomization.
func TestStrictnessHasTeeth(t *testing.T) {
	b, err := os.ReadFile("kubernetes/base/deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Replace(b, []byte("readinessProbe:"), []byte("readynessProbe:"), 1)
	if _, err := decodeStrict(bad); err == nil || !strings.Contains(err.Error(), "readynessProbe") {
		t.Errorf("misspelt field in a Deployment: %v", err)
	}
	dir := t.TempDir()
	for name, body := range map[string]string{
		"kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresource:\n  - sa.yaml\n",
		"sa.yaml":            "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: x\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	if _, err := k.Run(filesys.MakeFsOnDisk(), dir); err == nil {
		t.Error("a kustomization with a misspelt field rendered")
	}
}

func TestBase(t *testing.T) {
	m := render(t, "kubernetes/base")
	checkCommon(t, m)
	d := m.get("Deployment", "toolsvc").(*appsv1.Deployment)
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("the embedded store needs the Recreate strategy, got %s", d.Spec.Strategy.Type)
	}
	pvc := volume(t, d, "data").PersistentVolumeClaim
	if pvc == nil || m.get("PersistentVolumeClaim", pvc.ClaimName) == nil {
		t.Errorf("the data volume is not the PersistentVolumeClaim")
	}
	if hpa := m.get("HorizontalPodAutoscaler", "toolsvc").(*autoscalingv2.HorizontalPodAutoscaler); hpa.Spec.MaxReplicas != 1 {
		t.Errorf("the embedded store cannot be shared, but the HPA may scale to %d", hpa.Spec.MaxReplicas)
	}
}

func TestPostgresOverlay(t *testing.T) {
	m := render(t, "kubernetes/overlays/postgres")
	checkCommon(t, m)
	d := m.get("Deployment", "toolsvc").(*appsv1.Deployment)
	if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 0 {
		t.Errorf("strategy: %+v", d.Spec.Strategy)
	}
	if v := volume(t, d, "data"); v.PersistentVolumeClaim != nil || v.EmptyDir == nil {
		t.Errorf("data volume: %+v", v.VolumeSource)
	}
	for k := range m {
		if strings.HasPrefix(k, "PersistentVolumeClaim/") {
			t.Errorf("%s left in the overlay", k)
		}
	}
	url := env(d, "TOOLSVC_STORE_URL")
	if url == nil || url.ValueFrom == nil || url.ValueFrom.SecretKeyRef == nil || url.ValueFrom.SecretKeyRef.Name != "toolsvc-postgres" {
		t.Errorf("TOOLSVC_STORE_URL: %+v", url)
	}
	if hpa := m.get("HorizontalPodAutoscaler", "toolsvc").(*autoscalingv2.HorizontalPodAutoscaler); *hpa.Spec.MinReplicas < 2 || hpa.Spec.MaxReplicas <= *hpa.Spec.MinReplicas {
		t.Errorf("replicas %d..%d", *hpa.Spec.MinReplicas, hpa.Spec.MaxReplicas)
	}
	np := m.get("NetworkPolicy", "toolsvc").(*networkingv1.NetworkPolicy)
	found := false
	for _, e := range np.Spec.Egress {
		for _, p := range e.Ports {
			found = found || p.Port.IntValue() == 5432
		}
	}
	if !found {
		t.Error("the NetworkPolicy does not let the pods reach PostgreSQL")
	}
}

// TestResourcesConfigMapLoads loads the toolsvc resources of the
// ConfigMap as the service does, policy examples included.
func TestResourcesConfigMapLoads(t *testing.T) {
	cm := render(t, "kubernetes/base").get("ConfigMap", "toolsvc-resources").(*corev1.ConfigMap)
	dir := t.TempDir()
	for name, body := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	resources, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var docs []policy.Document
	for _, r := range resources {
		if r.Kind != config.KindPolicy {
			t.Errorf("%s: only Policy resources are checked here, got %s", r.Source(), r.Kind)
			continue
		}
		var spec policy.Spec
		if err := r.Decode(&spec); err != nil {
			t.Fatal(err)
		}
		docs = append(docs, policy.Document{Name: r.Metadata.Name, Source: r.Source(), Spec: spec})
	}
	if len(docs) == 0 {
		t.Fatal("no policy in the ConfigMap")
	}
	if _, err := policy.New(docs, policy.Options{}); err != nil {
		t.Errorf("the policy does not load: %v", err)
	}
}

func volume(t *testing.T, d *appsv1.Deployment, name string) corev1.Volume {
	t.Helper()
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no volume %s", name)
	return corev1.Volume{}
}

func env(d *appsv1.Deployment, name string) *corev1.EnvVar {
	return envOf(d.Spec.Template.Spec.Containers[0], name)
}

func envOf(c corev1.Container, name string) *corev1.EnvVar {
	for _, e := range c.Env {
		if e.Name == name {
			return &e
		}
	}
	return nil
}

// checkCommon checks what base and overlay share: the kinds, the pod's
// hardening, probes and resources, and that every reference between
// objects (selectors, ports, ConfigMaps, Secrets) resolves.
func checkCommon(t *testing.T, m manifests) {
	t.Helper()
	for _, want := range []string{"Deployment/toolsvc", "Service/toolsvc", "ConfigMap/toolsvc-resources", "Secret/toolsvc-api-key",
		"HorizontalPodAutoscaler/toolsvc", "PodDisruptionBudget/toolsvc", "NetworkPolicy/toolsvc", "ServiceMonitor/toolsvc", "ServiceAccount/toolsvc"} {
		if m[want] == nil {
			t.Errorf("%s missing", want)
		}
	}
	d, ok := m.get("Deployment", "toolsvc").(*appsv1.Deployment)
	if !ok {
		t.FailNow()
	}
	pod := d.Spec.Template.Spec
	podLabels := labels.Set(d.Spec.Template.Labels)
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || !sel.Matches(podLabels) {
		t.Errorf("the Deployment's selector does not match its pods: %v", err)
	}
	if d.Spec.Replicas != nil {
		t.Error("spec.replicas is set; the HorizontalPodAutoscaler owns it")
	}

	// Hardening.
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext: %+v", psc)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the service account token is mounted")
	}
	// toolsvc as PID 1 reaps only its own children: the pause container,
	// PID 1 of a shared process namespace, reaps the orphans of tools'
	// programs.
	if pod.ShareProcessNamespace == nil || !*pod.ShareProcessNamespace {
		t.Error("shareProcessNamespace is not true, so nothing reaps the orphans of tools' programs")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Errorf("container securityContext: %+v", sc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources: %+v", c.Resources)
	}
	checkMemoryBudget(t, c)

	// Probes on the health endpoints, through the named port.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
		want := "/healthz"
		if name == "readiness" {
			want = "/readyz"
		}
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want || ports[p.HTTPGet.Port.String()] == 0 {
			t.Errorf("%s probe: %+v", name, p)
		}
		// Through the admin address, which clients holding every
		// connection of the main one cannot starve.
		if p != nil && p.HTTPGet != nil && p.HTTPGet.Port.String() != "admin" {
			t.Errorf("%s probe on port %s, want admin", name, p.HTTPGet.Port.String())
		}
	}
	adminAddr := ""
	for _, e := range c.Env {
		if e.Name == "TOOLSVC_ADMIN_ADDR" {
			adminAddr = e.Value
		}
	}
	if want := fmt.Sprintf(":%d", ports["admin"]); adminAddr != want {
		t.Errorf("TOOLSVC_ADMIN_ADDR = %q, want %q (the admin port)", adminAddr, want)
	}
	if pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds < 35 {
		t.Error("terminationGracePeriodSeconds leaves calls in flight no time to drain (TOOLSVC_SHUTDOWN_TIMEOUT is 30s)")
	}

	// Every mount has a volume, and the root filesystem is read-only, so
	// the places the service writes are volumes.
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	mounted := map[string]bool{}
	for _, vm := range c.VolumeMounts {
		if _, ok := vols[vm.Name]; !ok {
			t.Errorf("mount %s has no volume", vm.Name)
		}
		mounted[vm.MountPath] = true
	}
	for _, path := range []string{"/workspace", "/data", "/tmp", "/etc/toolsvc"} {
		if !mounted[path] {
			t.Errorf("%s is not a volume", path)
		}
	}
	for _, v := range vols {
		if v.ConfigMap != nil && m.get("ConfigMap", v.ConfigMap.Name) == nil {
			t.Errorf("volume %s: no ConfigMap %s", v.Name, v.ConfigMap.Name)
		}
	}

	// Environment: every variable is one the service reads, and every
	// secret reference resolves.
	known := knownVariables(t)
	for _, e := range c.Env {
		if !known[e.Name] {
			t.Errorf("env %s is not a variable toolsvc reads", e.Name)
		}
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			ref := e.ValueFrom.SecretKeyRef
			s, _ := m.get("Secret", ref.Name).(*corev1.Secret)
			if s == nil {
				t.Errorf("env %s: no Secret %s", e.Name, ref.Name)
			} else if _, ok := s.StringData[ref.Key]; !ok {
				t.Errorf("env %s: Secret %s has no key %s", e.Name, ref.Name, ref.Key)
			}
		}
	}

	// The Service reaches the pods' port; the ServiceMonitor scrapes it.
	svc := m.get("Service", "toolsvc").(*corev1.Service)
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) || len(svc.Spec.Selector) == 0 {
		t.Errorf("the Service selects no toolsvc pod: %v", svc.Spec.Selector)
	}
	svcPorts := map[string]bool{}
	for _, p := range svc.Spec.Ports {
		if ports[p.TargetPort.String()] == 0 && p.TargetPort.IntValue() == 0 {
			t.Errorf("Service port %s targets %s, not a container port", p.Name, p.TargetPort.String())
		}
		svcPorts[p.Name] = true
	}
	smon := m.get("ServiceMonitor", "toolsvc").(*monitoringv1.ServiceMonitor)
	if s, err := metav1.LabelSelectorAsSelector(&smon.Spec.Selector); err != nil || !s.Matches(labels.Set(svc.Labels)) {
		t.Errorf("the ServiceMonitor does not select the Service: %v", err)
	}
	for _, ep := range smon.Spec.Endpoints {
		if !svcPorts[ep.Port] || ep.Path != "/metrics" {
			t.Errorf("ServiceMonitor endpoint %s %s", ep.Port, ep.Path)
		}
	}

	// The autoscaler, the disruption budget and the network policy are
	// about these pods.
	hpa := m.get("HorizontalPodAutoscaler", "toolsvc").(*autoscalingv2.HorizontalPodAutoscaler)
	if ref := hpa.Spec.ScaleTargetRef; ref.Kind != "Deployment" || ref.Name != d.Name || ref.APIVersion != "apps/v1" {
		t.Errorf("HPA target %+v", ref)
	}
	if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas < 1 || hpa.Spec.MaxReplicas < *hpa.Spec.MinReplicas || len(hpa.Spec.Metrics) == 0 {
		t.Errorf("HPA spec %+v", hpa.Spec)
	}
	pdb := m.get("PodDisruptionBudget", "toolsvc").(*policyv1.PodDisruptionBudget)
	if s, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err != nil || !s.Matches(podLabels) {
		t.Errorf("the PodDisruptionBudget does not select the pods: %v", err)
	}
	if pdb.Spec.MinAvailable != nil && pdb.Spec.MinAvailable.IntValue() >= int(*hpa.Spec.MinReplicas) {
		t.Error("the PodDisruptionBudget blocks every drain")
	}
	np := m.get("NetworkPolicy", "toolsvc").(*networkingv1.NetworkPolicy)
	if s, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector); err != nil || !s.Matches(podLabels) {
		t.Errorf("the NetworkPolicy does not select the pods: %v", err)
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) || !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		t.Errorf("policy types %v", np.Spec.PolicyTypes)
	}
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			if ports[p.Port.String()] == 0 && p.Port.IntValue() == 0 {
				t.Errorf("ingress port %s is not a container port", p.Port.String())
			}
		}
	}
}

// memoryMargin is what the service and its processes hold outside the
// ceilings of checkMemoryBudget: code and runtime (docs/limits.md, "Total
// memory").
const memoryMargin = 128 << 20

// checkMemoryBudget adds up what may share the container's memory limit:
// the service's heap (GOMEMLIMIT), the tool workers and the shell
// interpreters, each up to TOOLSVC_TOOL_MEMORY_LIMIT, and the margin. Each
// figure must be set in the manifest: the defaults follow the CPUs.
func checkMemoryBudget(t *testing.T, c corev1.Container) {
	t.Helper()
	value := func(name string, size bool) int64 {
		e := envOf(c, name)
		if e == nil || e.ValueFrom != nil {
			t.Errorf("%s is not set to a value: the memory budget cannot be added up", name)
			return 0
		}
		n, err := parseBytes(e.Value, size)
		if err != nil || n <= 0 {
			t.Errorf("%s=%q: %v", name, e.Value, err)
		}
		return n
	}
	heap := value("GOMEMLIMIT", true)
	ceiling := value("TOOLSVC_TOOL_MEMORY_LIMIT", true)
	workers := value("TOOLSVC_TOOL_WORKERS", false)
	shells := value("TOOLSVC_PROCESS_TOOL_CONCURRENCY", false)
	limit := c.Resources.Limits.Memory().Value()
	if sum := heap + (workers+shells)*ceiling + memoryMargin; sum > limit {
		t.Errorf("GOMEMLIMIT %d MiB + (%d workers + %d shell calls) x %d MiB + %d MiB = %d MiB, over the memory limit of %d MiB",
			heap>>20, workers, shells, ceiling>>20, memoryMargin>>20, sum>>20, limit>>20)
	}
}

// parseBytes reads a count, or with size a size as GOMEMLIMIT and
// toolsvc's sizes are written: 512MiB, 1GiB or a number of bytes.
func parseBytes(s string, size bool) (int64, error) {
	mult := int64(1)
	if size {
		for suffix, m := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
			if n, ok := strings.CutSuffix(s, suffix); ok {
				s, mult = n, m
			}
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n * mult, err
}

// knownVariables are the environment variables toolsvc reads: the env
// tags of cmd/toolsvc's Config, and what the manifests use besides
// (downward API helpers, GOMEMLIMIT, OTEL_RESOURCE_ATTRIBUTES).
func knownVariables(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{
		"POD_NAME": true, "POD_NAMESPACE": true, "NODE_NAME": true, "GOMEMLIMIT": true, "OTEL_RESOURCE_ATTRIBUTES": true,
	}
	f, err := parser.ParseFile(token.NewFileSet(), "../cmd/toolsvc/config.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		field, ok := n.(*ast.Field)
		if !ok || field.Tag == nil {
			return true
		}
		tag, _ := strconv.Unquote(field.Tag.Value)
		if name := reflect.StructTag(tag).Get("env"); name != "" {
			known[name] = true
		}
		return true
	})
	if !known["TOOLSVC_ADDR"] || !known["OTEL_TRACES_EXPORTER"] || !known["TOOLSVC_STORE_URL"] {
		t.Fatal("could not read the variables of cmd/toolsvc/config.go")
	}
	return known
}
