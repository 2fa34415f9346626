package charts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/release"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/kubetest"
)

// The release of every render: the name and namespace config/ installs into, so that the
// kustomize render and the chart's can be compared as they are.
const (
	releaseName      = "snigate"
	releaseNamespace = "snigate-system"
)

// kubeVersion is the cluster the renders and lints assume: the API server the tests run.
var kubeVersion = &chartutil.KubeVersion{Version: "v" + kubetest.Version, Major: "1", Minor: "36"}

// helmLabels are the labels only the chart sets (templates/_helpers.tpl): the comparison with
// config/ removes them and nothing else.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}

// customValues changes every value the chart has from its default, as a user's values file
// would (parsed the way `helm install -f` parses one).
const customValues = `
image: {repository: registry.example/platform/snigate, tag: v1.2.3, pullPolicy: Always}
imagePullSecrets: [{name: regcred}]
replicas: 3
resources:
  requests: {cpu: 200m, memory: 128Mi}
  limits: {memory: 256Mi}
logFormat: text
logLevel: debug
admin: {auth: kubernetes, exposed: true, port: 9443}
dataplane: {pullPolicy: Always}
loadBalancerAddresses: 203.0.113.0/24
extraArgs: [--drain-timeout=45s]
extraEnv: [{name: GOMEMLIMIT, value: 200MiB}]
nodeSelector: {kubernetes.io/os: linux, node-role.example/edge: "true"}
tolerations: [{key: dedicated, operator: Equal, value: edge, effect: NoSchedule}]
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector: {matchLabels: {app.kubernetes.io/name: snigate, app.kubernetes.io/component: controller}}
topologySpreadConstraints:
- maxSkew: 1
  topologyKey: topology.kubernetes.io/zone
  whenUnsatisfiable: ScheduleAnyway
  labelSelector: {matchLabels: {app.kubernetes.io/name: snigate, app.kubernetes.io/component: controller}}
priorityClassName: system-cluster-critical
podAnnotations: {example.com/scrape: "false"}
podLabels: {team: edge}
serviceAccount: {annotations: {iam.example/role: snigate}}
podDisruptionBudget: {enabled: true, maxUnavailable: 1}
networkPolicy: {enabled: false}
serviceMonitor: {enabled: true, labels: {release: prometheus}, interval: 15s, scrapeTimeout: 10s}
admissionPolicies:
  namespaceLabels:
    extraAllowedUsers: [platform-admin@example.com]
    allowedGroups: [system:masters, platform-admins]
  externalDatabaseTLS:
    resourceRules:
    - {apiGroups: [apps.platform.example], apiVersions: ["*"], operations: [CREATE, UPDATE], resources: [postgreses, redises]}
`

// customImage is customValues' image.
const customImage = "registry.example/platform/snigate:v1.2.3"

func chartDir(t testing.TB) string {
	t.Helper()
	return filepath.Join(kubetest.RepoRoot(t), "charts", "snigate")
}

// values parses a values file's text.
func values(t testing.TB, text string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValues([]byte(text))
	if err != nil {
		t.Fatalf("values %q: %v", text, err)
	}
	return v.AsMap()
}

// loadChart loads charts/snigate from its folder, as `helm install charts/snigate` does.
func loadChart(t testing.TB) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir(t))
	if err != nil {
		t.Fatalf("loading the chart %s: %v", chartDir(t), err)
	}
	return ch
}

// tryRender renders the chart as `helm install --dry-run` does without a cluster (the
// Helm SDK's action.Install with DryRun and ClientOnly), crds/ included when includeCRDs.
func tryRender(t testing.TB, vals map[string]any, includeCRDs bool) ([]*unstructured.Unstructured, error) {
	t.Helper()
	rel, err := tryInstall(t, vals, includeCRDs)
	if err != nil {
		return nil, err
	}
	return decodeAll(rel.Manifest)
}

// tryInstall is the dry-run release of tryRender.
func tryInstall(t testing.TB, vals map[string]any, includeCRDs bool) (*release.Release, error) {
	t.Helper()
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.DryRun = true
	install.ClientOnly = true
	install.ReleaseName = releaseName
	install.Namespace = releaseNamespace
	install.IncludeCRDs = includeCRDs
	install.KubeVersion = kubeVersion
	return install.Run(loadChart(t), vals)
}

func install(t testing.TB, vals map[string]any, includeCRDs bool) *release.Release {
	t.Helper()
	rel, err := tryInstall(t, vals, includeCRDs)
	if err != nil {
		t.Fatalf("rendering %s: %v", chartDir(t), err)
	}
	return rel
}

func render(t testing.TB, vals map[string]any, includeCRDs bool) []*unstructured.Unstructured {
	t.Helper()
	objs, err := tryRender(t, vals, includeCRDs)
	if err != nil {
		t.Fatalf("rendering %s: %v", chartDir(t), err)
	}
	return objs
}

// decodeAll decodes every object of a multi-document YAML stream.
func decodeAll(text string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(text), 4096)
	var objs []*unstructured.Unstructured
	for i := 0; ; i++ {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("YAML document %d: %w", i, err)
		}
		if len(obj) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: obj})
	}
}

func decodeFile(t testing.TB, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeAll(string(data))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return objs
}

// key names an object as the comparisons do.
func key(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetKind() + " " + u.GetName()
	}
	return u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
}

func keys(objs []*unstructured.Unstructured) []string {
	var ks []string
	for _, u := range objs {
		ks = append(ks, key(u))
	}
	slices.Sort(ks)
	return ks
}

func keysInOrder(objs []*unstructured.Unstructured) []string {
	var ks []string
	for _, u := range objs {
		ks = append(ks, key(u))
	}
	return ks
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, u := range objs {
		if u.GetKind() == kind && u.GetName() == name {
			return u
		}
	}
	return nil
}

// get decodes the object kind/name of objs into its Go type, strictly: a field the type
// does not have (a typo in a template) fails the test.
func get[T any](t testing.TB, objs []*unstructured.Unstructured, kind, name string) *T {
	t.Helper()
	u := find(objs, kind, name)
	if u == nil {
		t.Fatalf("no %s %s in the render; it has %v", kind, name, keys(objs))
	}
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, out, true); err != nil {
		t.Fatalf("%s: decoding into %T: %v", key(u), out, err)
	}
	return out
}

// controllerContainer is the snigate container of the controller Deployment.
func controllerContainer(t testing.TB, d *appsv1.Deployment) corev1.Container {
	t.Helper()
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "snigate" {
			return c
		}
	}
	t.Fatalf("Deployment %s: no container snigate", d.Name)
	return corev1.Container{}
}

func env(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

func diff(t testing.TB, what string, want, got any) {
	t.Helper()
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("%s (-want +got):\n%s", what, d)
	}
}

// TestLint is `helm lint charts/snigate`, with the default values and with customValues: an
// error or a warning fails it (information, such as the missing icon, is logged). A value the
// chart refuses must count as a problem too, or the lint would pass what install refuses.
func TestLint(t *testing.T) {
	for name, vals := range map[string]map[string]any{"defaults": nil, "custom": values(t, customValues)} {
		t.Run(name, func(t *testing.T) {
			for _, p := range lintProblems(t, vals) {
				t.Errorf("helm lint with %s values: %s", name, p)
			}
		})
	}
	t.Run("refused value", func(t *testing.T) {
		if p := lintProblems(t, values(t, "admin: {exposed: true}")); len(p) == 0 {
			t.Error("helm lint passed admin.exposed without admin.auth=kubernetes")
		}
	})
}

// lintProblems lints the chart with vals and returns its errors and warnings.
func lintProblems(t *testing.T, vals map[string]any) []string {
	t.Helper()
	// In lint mode Helm's template function fail only logs "[INFO] Fail: ..." to the standard
	// logger and renders on: catch that, a refused value is a problem here.
	var logged strings.Builder
	log.SetOutput(&logged)
	linter := lint.AllWithKubeVersion(chartDir(t), vals, releaseNamespace, kubeVersion)
	log.SetOutput(os.Stderr)
	var problems []string
	if strings.Contains(logged.String(), "Fail:") {
		problems = append(problems, "the chart refused the values: "+strings.TrimSpace(logged.String()))
	}
	for _, m := range linter.Messages {
		if m.Severity >= support.WarningSev {
			problems = append(problems, m.Error())
		} else {
			t.Logf("helm lint: %s", m)
		}
	}
	return problems
}

// TestCRDsAreKustomizeRender: the chart's crds/ are config/crd as kustomize renders it
// (scripts/generate.sh writes them), object by object.
func TestCRDsAreKustomizeRender(t *testing.T) {
	path := filepath.Join(chartDir(t), "crds", "crds.yaml")
	chartCRDs := decodeFile(t, path)
	want := decodeFile(t, kubetest.KustomizedCRDs(t)[0])
	if len(want) == 0 {
		t.Fatal("kubectl kustomize config/crd rendered nothing")
	}
	diff(t, path+": objects, in order, of `kubectl kustomize config/crd` (run scripts/generate.sh)", keysInOrder(want), keysInOrder(chartCRDs))
	got := index(t, path, chartCRDs)
	for _, w := range want {
		if g := got[key(w)]; g != nil {
			if d := cmp.Diff(w.Object, g.Object); d != "" {
				t.Errorf("%s: %s differs from `kubectl kustomize config/crd` (run scripts/generate.sh) (-kustomize +chart):\n%s", path, key(w), d)
			}
		}
	}
	// Nothing else in crds/: Helm installs every file there.
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "crds.yaml" {
			t.Errorf("%s: unexpected file %s (scripts/generate.sh writes crds.yaml only)", filepath.Dir(path), e.Name())
		}
	}
}

// defaultObjects are the objects the chart's templates render with the default values.
var defaultObjects = []string{
	"ClusterRole snigate",
	"ClusterRole snigate-admin-reader",
	"ClusterRole snigate-dataplane",
	"ClusterRoleBinding snigate",
	"ClusterRoleBinding snigate-dataplane",
	"Deployment snigate-system/snigate-controller",
	"GatewayClass snigate",
	"NetworkPolicy snigate-system/snigate-controller",
	"PodDisruptionBudget snigate-system/snigate-controller",
	"Role snigate-system/snigate-leader-election",
	"RoleBinding snigate-system/snigate-leader-election",
	"ServiceAccount snigate-system/snigate",
	"ValidatingAdmissionPolicy external-database-tls.snigate.dev",
	"ValidatingAdmissionPolicy gateway-hostnames.snigate.dev",
	"ValidatingAdmissionPolicy namespace-labels.snigate.dev",
	"ValidatingAdmissionPolicy route-hostnames.snigate.dev",
	"ValidatingAdmissionPolicyBinding external-database-tls.snigate.dev",
	"ValidatingAdmissionPolicyBinding gateway-hostnames.snigate.dev",
	"ValidatingAdmissionPolicyBinding namespace-labels.snigate.dev",
	"ValidatingAdmissionPolicyBinding route-hostnames.snigate.dev",
}

// TestRenderDefaults checks the default render: what config/ installs (TestSameAsKustomize
// compares it in full), with the image tag from the chart's appVersion, a PodDisruptionBudget
// for the two replicas, and no metrics Service or ServiceMonitor.
func TestRenderDefaults(t *testing.T) {
	objs := render(t, nil, false)
	diff(t, "objects of the default render", defaultObjects, keys(objs))

	image := "snigate:" + loadChart(t).Metadata.AppVersion
	d := get[appsv1.Deployment](t, objs, "Deployment", "snigate-controller")
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("Deployment replicas = %v, want 2", d.Spec.Replicas)
	}
	c := controllerContainer(t, d)
	if c.Image != image {
		t.Errorf("image = %q, want %q (image.tag defaults to appVersion)", c.Image, image)
	}
	if v, _ := env(c, "SNIGATE_DATAPLANE_IMAGE"); v != image {
		t.Errorf("SNIGATE_DATAPLANE_IMAGE = %q, want the controller's image %q", v, image)
	}
	if c.ImagePullPolicy != "" {
		t.Errorf("imagePullPolicy = %q, want unset (the cluster's default)", c.ImagePullPolicy)
	}
	diff(t, "controller args", []string{"controller", "--proxy=false", "--provision", "--log-format=json",
		"--metrics=:9902", "--health-probe-address=:8081"}, c.Args)

	pdb := get[policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget", "snigate-controller")
	diff(t, "PodDisruptionBudget minAvailable", ptr(intstr.FromInt32(1)), pdb.Spec.MinAvailable)
	if pdb.Spec.MaxUnavailable != nil {
		t.Errorf("PodDisruptionBudget maxUnavailable = %v, want unset", pdb.Spec.MaxUnavailable)
	}
	diff(t, "PodDisruptionBudget selector", d.Spec.Selector, pdb.Spec.Selector)

	np := get[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", "snigate-controller")
	diff(t, "NetworkPolicy podSelector", *d.Spec.Selector, np.Spec.PodSelector)
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 0 || len(np.Spec.Ingress[0].Ports) != 2 {
		t.Errorf("NetworkPolicy ingress = %+v, want one rule from anywhere to 9902 and 8081", np.Spec.Ingress)
	}

	vap := get[admissionv1.ValidatingAdmissionPolicy](t, objs, "ValidatingAdmissionPolicy", "namespace-labels.snigate.dev")
	diff(t, "namespace-labels variables", map[string]string{
		"allowedUsers":  "['system:serviceaccount:snigate-system:snigate']",
		"allowedGroups": "['system:masters']",
	}, variables(vap, "allowedUsers", "allowedGroups"))
}

func ptr[T any](v T) *T { return &v }

func variables(vap *admissionv1.ValidatingAdmissionPolicy, names ...string) map[string]string {
	out := map[string]string{}
	for _, v := range vap.Spec.Variables {
		if slices.Contains(names, v.Name) {
			out[v.Name] = v.Expression
		}
	}
	return out
}

// TestRenderCustom renders customValues and checks what each value changes in the objects.
func TestRenderCustom(t *testing.T) {
	objs := render(t, values(t, customValues), false)
	want := slices.DeleteFunc(slices.Clone(defaultObjects), func(k string) bool { return strings.HasPrefix(k, "NetworkPolicy ") })
	want = append(want, "Service snigate-system/snigate-controller-metrics", "ServiceMonitor snigate-system/snigate-controller")
	slices.Sort(want)
	diff(t, "objects of the custom render (networkPolicy off, serviceMonitor on)", want, keys(objs))

	for _, u := range objs {
		if v := u.GetLabels()["app.kubernetes.io/version"]; v != "v1.2.3" {
			t.Errorf("%s: label app.kubernetes.io/version = %q, want the image tag v1.2.3", key(u), v)
		}
	}

	d := get[appsv1.Deployment](t, objs, "Deployment", "snigate-controller")
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("replicas = %v, want 3", d.Spec.Replicas)
	}
	diff(t, "Deployment selector (fixed: a selector cannot change on upgrade)", &metav1.LabelSelector{MatchLabels: map[string]string{
		"app.kubernetes.io/name": "snigate", "app.kubernetes.io/component": "controller"}}, d.Spec.Selector)
	c := controllerContainer(t, d)
	if c.Image != customImage {
		t.Errorf("image = %q, want %q", c.Image, customImage)
	}
	if v, _ := env(c, "SNIGATE_DATAPLANE_IMAGE"); v != customImage {
		t.Errorf("SNIGATE_DATAPLANE_IMAGE = %q, want the controller's image %q", v, customImage)
	}
	if v, _ := env(c, "GOMEMLIMIT"); v != "200MiB" {
		t.Errorf("extraEnv GOMEMLIMIT = %q, want 200MiB", v)
	}
	if c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("imagePullPolicy = %q, want Always", c.ImagePullPolicy)
	}
	diff(t, "controller args", []string{"controller", "--proxy=false", "--provision", "--log-format=text", "--log-level=debug",
		"--metrics=:9902", "--health-probe-address=:8081", "--admin-auth=kubernetes", "--admin=:9443",
		"--dataplane-pull-policy=Always", "--load-balancer-addresses=203.0.113.0/24", "--drain-timeout=45s"}, c.Args)
	diff(t, "container ports (admin.exposed adds the admin port)", []corev1.ContainerPort{
		{Name: "metrics", ContainerPort: 9902}, {Name: "probes", ContainerPort: 8081}, {Name: "admin", ContainerPort: 9443},
	}, c.Ports)
	diff(t, "resources", corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
	}, c.Resources)

	pod := d.Spec.Template.Spec
	diff(t, "nodeSelector", map[string]string{"kubernetes.io/os": "linux", "node-role.example/edge": "true"}, pod.NodeSelector)
	diff(t, "tolerations", []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "edge", Effect: corev1.TaintEffectNoSchedule}}, pod.Tolerations)
	controllerSelector := &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "snigate", "app.kubernetes.io/component": "controller"}}
	diff(t, "affinity", &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 100, PodAffinityTerm: corev1.PodAffinityTerm{
			TopologyKey: "kubernetes.io/hostname", LabelSelector: controllerSelector}}}}}, pod.Affinity)
	diff(t, "topologySpreadConstraints", []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone",
		WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: controllerSelector}}, pod.TopologySpreadConstraints)
	if pod.PriorityClassName != "system-cluster-critical" {
		t.Errorf("priorityClassName = %q, want system-cluster-critical", pod.PriorityClassName)
	}
	diff(t, "imagePullSecrets", []corev1.LocalObjectReference{{Name: "regcred"}}, pod.ImagePullSecrets)
	diff(t, "pod annotations", map[string]string{"example.com/scrape": "false"}, d.Spec.Template.Annotations)
	if got := d.Spec.Template.Labels["team"]; got != "edge" {
		t.Errorf("pod label team = %q, want edge (podLabels)", got)
	}
	if !labels.SelectorFromSet(d.Spec.Selector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("pod labels %v do not match the Deployment's selector %v", d.Spec.Template.Labels, d.Spec.Selector.MatchLabels)
	}

	sa := get[corev1.ServiceAccount](t, objs, "ServiceAccount", "snigate")
	diff(t, "ServiceAccount annotations", map[string]string{"iam.example/role": "snigate"}, sa.Annotations)

	pdb := get[policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget", "snigate-controller")
	diff(t, "PodDisruptionBudget maxUnavailable", ptr(intstr.FromInt32(1)), pdb.Spec.MaxUnavailable)
	if pdb.Spec.MinAvailable != nil {
		t.Errorf("PodDisruptionBudget minAvailable = %v, want unset (maxUnavailable replaces it)", pdb.Spec.MinAvailable)
	}

	svc := get[corev1.Service](t, objs, "Service", "snigate-controller-metrics")
	diff(t, "metrics Service ports", []corev1.ServicePort{{Name: "metrics", Port: 9902, TargetPort: intstr.FromString("metrics"), Protocol: corev1.ProtocolTCP}}, svc.Spec.Ports)
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("metrics Service selector %v does not select the controller Pods %v", svc.Spec.Selector, d.Spec.Template.Labels)
	}

	sm := get[monitoringv1.ServiceMonitor](t, objs, "ServiceMonitor", "snigate-controller")
	if sm.Labels["release"] != "prometheus" {
		t.Errorf("ServiceMonitor labels %v: want release=prometheus (serviceMonitor.labels)", sm.Labels)
	}
	smSelector, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil {
		t.Fatalf("ServiceMonitor selector: %v", err)
	}
	if !smSelector.Matches(labels.Set(svc.Labels)) {
		t.Errorf("ServiceMonitor selector %v does not select the metrics Service (labels %v)", smSelector, svc.Labels)
	}
	diff(t, "ServiceMonitor namespaceSelector", monitoringv1.NamespaceSelector{MatchNames: []string{releaseNamespace}}, sm.Spec.NamespaceSelector)
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("ServiceMonitor endpoints = %+v, want one", sm.Spec.Endpoints)
	}
	ep := sm.Spec.Endpoints[0]
	if ep.Port != "metrics" || ep.Path != "/metrics" || ep.Interval != "15s" || ep.ScrapeTimeout != "10s" {
		t.Errorf("ServiceMonitor endpoint = %+v, want port metrics, path /metrics, interval 15s, scrapeTimeout 10s", ep)
	}

	vap := get[admissionv1.ValidatingAdmissionPolicy](t, objs, "ValidatingAdmissionPolicy", "namespace-labels.snigate.dev")
	diff(t, "namespace-labels variables", map[string]string{
		"allowedUsers":  "['system:serviceaccount:snigate-system:snigate', 'platform-admin@example.com']",
		"allowedGroups": "['system:masters', 'platform-admins']",
	}, variables(vap, "allowedUsers", "allowedGroups"))
	db := get[admissionv1.ValidatingAdmissionPolicy](t, objs, "ValidatingAdmissionPolicy", "external-database-tls.snigate.dev")
	diff(t, "external-database-tls resourceRules", []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
		Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
		Rule:       admissionv1.Rule{APIGroups: []string{"apps.platform.example"}, APIVersions: []string{"*"}, Resources: []string{"postgreses", "redises"}},
	}}}, db.Spec.MatchConstraints.ResourceRules)
}

// TestRenderToggles: the values that add or remove objects, one at a time.
func TestRenderToggles(t *testing.T) {
	for _, tc := range []struct {
		name, values string
		gone, added  []string
		check        func(t *testing.T, objs []*unstructured.Unstructured)
	}{
		{name: "one replica, no PodDisruptionBudget", values: "replicas: 1",
			gone: []string{"PodDisruptionBudget snigate-system/snigate-controller"}},
		{name: "PodDisruptionBudget off", values: "podDisruptionBudget: {enabled: false}",
			gone: []string{"PodDisruptionBudget snigate-system/snigate-controller"}},
		{name: "metrics Service alone", values: "metricsService: {enabled: true}",
			added: []string{"Service snigate-system/snigate-controller-metrics"}},
		{name: "no GatewayClass", values: "gatewayClass: {enabled: false}", gone: []string{"GatewayClass snigate"}},
		{name: "no admission policies", values: "admissionPolicies: {enabled: false}", gone: []string{
			"ValidatingAdmissionPolicy external-database-tls.snigate.dev", "ValidatingAdmissionPolicy gateway-hostnames.snigate.dev",
			"ValidatingAdmissionPolicy namespace-labels.snigate.dev", "ValidatingAdmissionPolicy route-hostnames.snigate.dev",
			"ValidatingAdmissionPolicyBinding external-database-tls.snigate.dev", "ValidatingAdmissionPolicyBinding gateway-hostnames.snigate.dev",
			"ValidatingAdmissionPolicyBinding namespace-labels.snigate.dev", "ValidatingAdmissionPolicyBinding route-hostnames.snigate.dev"}},
		{name: "NetworkPolicy admits the exposed admin port, from the given peers",
			values: "admin: {auth: kubernetes, exposed: true}\nnetworkPolicy: {from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]}",
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				np := get[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", "snigate-controller")
				tcp := corev1.ProtocolTCP
				port := func(p int32) networkingv1.NetworkPolicyPort {
					return networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: ptr(intstr.FromInt32(p))}
				}
				diff(t, "NetworkPolicy ingress", []networkingv1.NetworkPolicyIngressRule{{
					Ports: []networkingv1.NetworkPolicyPort{port(9902), port(8081), port(9901)},
					From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
						MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}}}},
				}}, np.Spec.Ingress)
			}},
		{name: "admin auth without exposing the admin listener",
			values: "admin: {auth: kubernetes}",
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				c := controllerContainer(t, get[appsv1.Deployment](t, objs, "Deployment", "snigate-controller"))
				diff(t, "controller args", []string{"controller", "--proxy=false", "--provision", "--log-format=json",
					"--metrics=:9902", "--health-probe-address=:8081", "--admin-auth=kubernetes"}, c.Args)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, values(t, tc.values), false)
			want := slices.DeleteFunc(slices.Clone(defaultObjects), func(k string) bool { return slices.Contains(tc.gone, k) })
			want = append(want, tc.added...)
			slices.Sort(want)
			diff(t, "objects", want, keys(objs))
			if tc.check != nil {
				tc.check(t, objs)
			}
		})
	}
}

// TestRenderRefuses: values that would install something broken or unsafe fail the render,
// naming the value.
func TestRenderRefuses(t *testing.T) {
	for _, tc := range []struct{ values, want string }{
		{"admin: {exposed: true}", "admin.exposed needs admin.auth=kubernetes"},
		{`admin: {auth: "off"}`, `admin.auth: "off": want none or kubernetes`},
		{"logFormat: logfmt", `logFormat: "logfmt": want json or text`},
		{`podDisruptionBudget: {minAvailable: ""}`, "podDisruptionBudget: set minAvailable or maxUnavailable"},
		{`admissionPolicies: {namespaceLabels: {allowedGroups: ["it's"]}}`, "quotes and backslashes are not allowed"},
		{"image: {repository: ''}", "image.repository is required"},
	} {
		t.Run(tc.values, func(t *testing.T) {
			_, err := tryRender(t, values(t, tc.values), false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("render error = %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// TestApply installs the chart's render on a real kube-apiserver: crds/ for real (the
// templates' GatewayClass needs its CRD), the default render for real, and customValues'
// render with a server-side dry run (server-side apply, which validates fields strictly), so
// that the API server's schemas, CRD schemas included, judge every rendered object.
//
// The ServiceMonitor's CRD is prometheus-operator's own (testdata/, taken verbatim from its
// repository at the release of the Go module whose types TestRenderCustom decodes into):
// with it the API server checks the ServiceMonitor against the schema the operator
// publishes, which a strict decode into the Go type alone would not (enums, patterns).
func TestApply(t *testing.T) {
	testutil.SkipShort(t, "runs kube-apiserver and etcd")
	crdFile := filepath.Join(chartDir(t), "crds", "crds.yaml")
	env := kubetest.StartAPIServer(t, kubetest.Options{CRDs: []string{
		crdFile, filepath.Join(kubetest.RepoRoot(t), "charts", "testdata", "monitoring.coreos.com_servicemonitors.yaml"),
	}})
	cl, err := client.New(env.Config, client.Options{FieldValidation: "Strict"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	apply := func(t *testing.T, u *unstructured.Unstructured, opts ...client.ApplyOption) {
		t.Helper()
		opts = append([]client.ApplyOption{client.FieldOwner("snigate-chart-test"), client.ForceOwnership}, opts...)
		if err := cl.Apply(ctx, client.ApplyConfigurationFromUnstructured(u.DeepCopy()), opts...); err != nil {
			t.Errorf("applying %s: %v", key(u), err)
		}
	}
	// envtest installed the CRDs of crds/; Helm creates the rest of that folder too (the
	// Gateway API's safe-upgrades ValidatingAdmissionPolicy and its binding).
	for _, u := range decodeFile(t, crdFile) {
		if u.GetKind() != "CustomResourceDefinition" {
			apply(t, u)
		}
	}
	// `helm install --create-namespace`.
	apply(t, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": releaseNamespace}}})

	t.Run("defaults", func(t *testing.T) {
		objs := render(t, nil, false)
		for _, u := range objs {
			apply(t, u)
		}
		// What was applied is there, as the chart rendered it.
		for _, u := range objs {
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(u.GroupVersionKind())
			if err := cl.Get(ctx, client.ObjectKeyFromObject(u), got); err != nil {
				t.Errorf("%s after the install: %v", key(u), err)
			}
		}
		gc := &gatewayv1.GatewayClass{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(objs, "GatewayClass", "snigate").Object, gc); err != nil {
			t.Fatal(err)
		}
		if gc.Spec.ControllerName != "snigate.dev/gateway-controller" {
			t.Errorf("GatewayClass controllerName = %q", gc.Spec.ControllerName)
		}
	})
	t.Run("custom, dry run", func(t *testing.T) {
		objs := render(t, values(t, customValues), false)
		for _, u := range objs {
			apply(t, u, client.DryRunAll)
		}
		// The API server's answer for the ServiceMonitor, defaults filled in, still decodes
		// strictly into prometheus-operator's Go type.
		sm := find(objs, "ServiceMonitor", "snigate-controller").DeepCopy()
		ac := client.ApplyConfigurationFromUnstructured(sm)
		if err := cl.Apply(ctx, ac, client.FieldOwner("snigate-chart-test"), client.DryRunAll); err != nil {
			t.Fatalf("applying the ServiceMonitor: %v", err)
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(sm.Object, &monitoringv1.ServiceMonitor{}, true); err != nil {
			t.Errorf("ServiceMonitor as the API server returned it: %v", err)
		}
	})
	t.Run("RBAC as installed", func(t *testing.T) {
		// The controller's ServiceAccount is bound to its ClusterRole in the release
		// namespace.
		crb := &rbacv1.ClusterRoleBinding{}
		if err := cl.Get(ctx, client.ObjectKey{Name: "snigate"}, crb); err != nil {
			t.Fatal(err)
		}
		diff(t, "ClusterRoleBinding snigate subjects", []rbacv1.Subject{{Kind: "ServiceAccount", Name: "snigate", Namespace: releaseNamespace}}, crb.Subjects)
	})
}

// kustomize renders a kustomization folder with kubectl's built-in kustomize, as
// `kubectl apply -k` does.
func kustomize(t testing.TB, dir string) []*unstructured.Unstructured {
	t.Helper()
	kubectl, err := exec.LookPath("kubectl")
	testutil.Require(t, "kubectl (renders config/default with kustomize)", err)
	out, err := exec.Command(kubectl, "kustomize", dir).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	objs, err := decodeAll(string(out))
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	return objs
}

// Objects only one of the two installs has, by design. Anything else the one has and the
// other lacks fails TestSameAsKustomize.
var (
	// The namespace: Helm installs into one it is given (`--create-namespace`).
	kustomizeOnly = []string{"Namespace snigate-system"}
	// The PodDisruptionBudget: on by default in the chart for its two replicas; config/ has
	// none.
	chartOnly = []string{"PodDisruptionBudget snigate-system/snigate-controller"}
)

// TestSameAsKustomize: with the default values, release namespace snigate-system and the
// same image, the chart (crds/ and templates) installs the objects `kubectl apply -k
// config/default` does, field by field, less Helm's own labels (helmLabels) and the
// objects of kustomizeOnly and chartOnly. An edit of config/ that the chart does not follow
// (or the reverse) fails it.
//
// The image is set as the README says, in config/default's own kustomization (`kustomize
// edit set image`, here on a copy of config/), so the replacement that copies it into
// SNIGATE_DATAPLANE_IMAGE is compared with the chart's too. (In an overlay of config/default
// the replacement would run before the overlay's images transformer and keep snigate:dev.)
//
// The chart's render goes through kustomize as well, unchanged: kustomize's YAML round trip
// rewrites some block scalars (a folded CEL expression with a more-indented line gains a
// blank line), and only the same round trip on both sides makes them comparable.
func TestSameAsKustomize(t *testing.T) {
	tmp := t.TempDir()
	config := filepath.Join(tmp, "config")
	if err := os.CopyFS(config, os.DirFS(filepath.Join(kubetest.RepoRoot(t), "config"))); err != nil {
		t.Fatalf("copying config/: %v", err)
	}
	setImage := "images:\n- name: snigate\n  newName: registry.example/platform/snigate\n  newTag: v1.2.3\n"
	appendFile(t, filepath.Join(config, "default", "kustomization.yaml"), setImage)
	fromKustomize := index(t, "kubectl kustomize config/default", kustomize(t, filepath.Join(config, "default")))

	rel := install(t, values(t, "image: {repository: registry.example/platform/snigate, tag: v1.2.3}"), true)
	chartDir := filepath.Join(tmp, "chart")
	if err := os.Mkdir(chartDir, 0o755); err != nil {
		t.Fatal(err)
	}
	appendFile(t, filepath.Join(chartDir, "manifest.yaml"), rel.Manifest)
	appendFile(t, filepath.Join(chartDir, "kustomization.yaml"), "resources: [manifest.yaml]\n")
	fromChart := index(t, "the chart", kustomize(t, chartDir))

	for _, k := range kustomizeOnly {
		if _, ok := fromKustomize[k]; !ok {
			t.Errorf("config/default no longer has %s: update kustomizeOnly", k)
		}
		delete(fromKustomize, k)
	}
	for _, k := range chartOnly {
		if _, ok := fromChart[k]; !ok {
			t.Errorf("the chart no longer renders %s by default: update chartOnly", k)
		}
		delete(fromChart, k)
	}
	for k, want := range fromKustomize {
		got, ok := fromChart[k]
		if !ok {
			t.Errorf("%s: in config/default, not in the chart", k)
			continue
		}
		dropHelmLabels(got)
		if d := cmp.Diff(want.Object, got.Object); d != "" {
			t.Errorf("%s differs between config/default and the chart (-kustomize +chart):\n%s", k, d)
		}
	}
	for k := range fromChart {
		if _, ok := fromKustomize[k]; !ok {
			t.Errorf("%s: in the chart's default render, not in config/default", k)
		}
	}
	t.Logf("compared %d objects of config/default with the chart's", len(fromKustomize))
	if c := fromKustomize["Deployment snigate-system/snigate-controller"]; c != nil {
		d := get[appsv1.Deployment](t, []*unstructured.Unstructured{c}, "Deployment", "snigate-controller")
		if v, _ := env(controllerContainer(t, d), "SNIGATE_DATAPLANE_IMAGE"); v != customImage {
			t.Errorf("kustomize's SNIGATE_DATAPLANE_IMAGE = %q, want the overlay's image %q", v, customImage)
		}
	}
}

func appendFile(t testing.TB, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, err = f.WriteString(text)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}

// index keys objs by key, refusing duplicates.
func index(t testing.TB, what string, objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	t.Helper()
	m := map[string]*unstructured.Unstructured{}
	for _, u := range objs {
		if _, dup := m[key(u)]; dup {
			t.Errorf("%s: %s twice", what, key(u))
		}
		m[key(u)] = u
	}
	return m
}

// dropHelmLabels removes helmLabels from an object and its Pod template, and the labels
// field where nothing else is left.
func dropHelmLabels(u *unstructured.Unstructured) {
	strip := func(fields ...string) {
		l, found, _ := unstructured.NestedStringMap(u.Object, fields...)
		if !found {
			return
		}
		for _, h := range helmLabels {
			delete(l, h)
		}
		if len(l) == 0 {
			unstructured.RemoveNestedField(u.Object, fields...)
			return
		}
		_ = unstructured.SetNestedStringMap(u.Object, l, fields...)
	}
	strip("metadata", "labels")
	strip("spec", "template", "metadata", "labels")
}
