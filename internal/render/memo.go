package render

import (
	"strings"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/resources"
)

// memo carries per-exposure work from one render to the next (Options.Previous). A cluster
// renders on every change, and a new exposure among 10 000 must not cost 10 000 times the
// work of one: an exposure whose object is the same pointer as last time is not defaulted and
// validated again, and a route whose recipe (everything it is built from) is the same is
// the previous route itself, neither built nor compared field by field.
type memo struct {
	inputs map[*v1alpha1.DatabaseExposure]checked
	routes map[nsName]routeMemo
	// tenants are the TenantGateways' memos (tenantmemo.go), valid with opts.
	tenants map[nsName]*tenantMemo
	opts    renderOpts
	// exposures are the accepted exposures' memos (exposurememo.go).
	exposures map[nsName]*exposureMemo
	// in and the cert-manager objects are the render's input, which the next compares its
	// own with (changes.go).
	in           *resources.Resources
	issuers      []*cmv1.Issuer
	certificates []*cmv1.Certificate
	probes       map[[2]string]Probe
}

// checked is an exposure defaulted and validated.
type checked struct {
	d    *v1alpha1.DatabaseExposure // defaulted copy
	errs field.ErrorList
	// releaseErrs are those of metadata.name as the default release (a regular expression
	// each, 10 000 a change when not kept).
	releaseErrs []string
}

// routeRecipe is everything an exposure's route is built from (build.exposure).
type routeRecipe struct {
	uid              types.UID
	tenant           string // the TenantGateway's name (label)
	parentNS, parent string // the Gateway or ListenerSet
	viaSet           bool
	listener         string
	protocol         gwv1.ProtocolType
	backend          string
	backendPort      int32
	hosts            string
	namespace, name  string
	member           string // a member's route: the member's name
	engine           v1alpha1.Engine
}

type routeMemo struct {
	recipe routeRecipe
	tls    *gwv1.TLSRoute
	tcp    *gwv1.TCPRoute
}

func newMemo() *memo { return sizedMemo(nil, 0) }

// sizedMemo is a memo whose maps are made for as many entries as prev's (and exposures
// inputs): filled on every render, 10 000 entries each, grown from empty they were rehashed
// a dozen times and left twice their size in garbage.
func sizedMemo(prev *memo, exposures int) *memo {
	m := &memo{inputs: make(map[*v1alpha1.DatabaseExposure]checked, exposures)}
	if prev == nil {
		m.routes, m.tenants, m.exposures = map[nsName]routeMemo{}, map[nsName]*tenantMemo{}, map[nsName]*exposureMemo{}
		return m
	}
	m.routes = make(map[nsName]routeMemo, len(prev.routes))
	m.tenants = make(map[nsName]*tenantMemo, len(prev.tenants))
	m.exposures = make(map[nsName]*exposureMemo, len(prev.exposures))
	return m
}

// check defaults and validates src, or takes what the previous render found.
//
// The defaults are applied to a copy of the spec alone (inputs are never changed), and
// src itself is kept when they change nothing, as in a cluster, whose API server applied
// them on create: a whole copy of every exposure was a tenth of the controller's live heap
// at 10 000 exposures (bench/cpscale's heap profile), kept for as long as the exposure.
func (r *renderer) check(src *v1alpha1.DatabaseExposure) checked {
	c, ok := r.prev.inputs[src]
	if !ok {
		d := &v1alpha1.DatabaseExposure{TypeMeta: src.TypeMeta, ObjectMeta: src.ObjectMeta, Spec: *src.Spec.DeepCopy(), Status: src.Status}
		d.Default()
		if equality.Semantic.DeepEqual(d.Spec, src.Spec) {
			d = src
		}
		c = checked{d: d, errs: d.Validate()}
		if d.Spec.Release == "" {
			c.releaseErrs = validation.IsDNS1035Label(d.Name)
		}
	}
	r.out.memo.inputs[src] = c
	return c
}

// previousRoute is the route the previous render built from recipe, or nil.
func (r *renderer) previousRoute(key nsName, recipe routeRecipe) routeMemo {
	if m, ok := r.prev.routes[key]; ok && m.recipe == recipe {
		return m
	}
	return routeMemo{}
}

// setRecipe records the recipe of the route at key.
func (r *renderer) setRecipe(key nsName, recipe routeRecipe) {
	r.recipes[key] = recipe
	if r.rec != nil {
		r.rec.recipes = append(r.rec.recipes, keyedRecipe{key, recipe})
	}
}

// keepRoute records the route built from recipe for the next render.
func (r *renderer) keepRoute(key nsName, m routeMemo) {
	r.out.memo.routes[key] = m
}

func joinHosts(hosts []string) string { return strings.Join(hosts, ",") }
