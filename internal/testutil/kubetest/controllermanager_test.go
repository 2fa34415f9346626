package kubetest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/kubetest"
)

// gcTimeout bounds each wait for the garbage collector. It normally takes well under a
// second once its informers have synced; the first case also waits for that sync.
const gcTimeout = 60 * time.Second

// TestGarbageCollector shows that Options.GarbageCollector gives the test API server what
// a real cluster has: deleting an owner deletes the objects that carry a controller
// ownerReference to it, in background and foreground propagation, for core types and for
// CRDs (as a TenantGateway owns the Gateway and HTTPRoute it renders), and deleting a
// namespace empties and removes it.
func TestGarbageCollector(t *testing.T) {
	testutil.SkipShort(t, "runs kube-apiserver, etcd and kube-controller-manager")
	env := kubetest.StartAPIServer(t, kubetest.Options{CRDs: kubetest.StandardCRDs(t), GarbageCollector: true})
	cl, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	create(t, cl, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gc"}})

	t.Run("background", func(t *testing.T) {
		owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "gc", Name: "owner-bg"}}
		create(t, cl, owner)
		dependent := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "gc", Name: "dependent-bg",
			OwnerReferences: []metav1.OwnerReference{controllerRef("v1", "ConfigMap", owner)}}}
		create(t, cl, dependent)

		if err := cl.Delete(ctx, owner, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
			t.Fatal(err)
		}
		waitGone(t, cl, dependent)
	})

	t.Run("foreground", func(t *testing.T) {
		owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "gc", Name: "owner-fg"}}
		create(t, cl, owner)
		dependent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "gc", Name: "dependent-fg",
			OwnerReferences: []metav1.OwnerReference{controllerRef("v1", "ConfigMap", owner)}}}
		create(t, cl, dependent)

		if err := cl.Delete(ctx, owner, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
			t.Fatal(err)
		}
		// Foreground: the owner stays (with the foregroundDeletion finalizer) until its
		// blocking dependents are gone, so once the owner is gone the dependent must be too.
		waitGone(t, cl, owner)
		if err := cl.Get(ctx, client.ObjectKeyFromObject(dependent), &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
			t.Fatalf("owner gone in foreground deletion but its dependent is not (get: %v)", err)
		}
	})

	t.Run("crd", func(t *testing.T) {
		owner := gatewayAPI("Gateway", "owner-gw", map[string]any{
			"gatewayClassName": "gc",
			"listeners":        []any{map[string]any{"name": "http", "port": int64(80), "protocol": "HTTP"}},
		})
		create(t, cl, owner)
		dependent := gatewayAPI("HTTPRoute", "dependent-route", map[string]any{})
		dependent.SetOwnerReferences([]metav1.OwnerReference{controllerRef("gateway.networking.k8s.io/v1", "Gateway", owner)})
		create(t, cl, dependent)

		if err := cl.Delete(ctx, owner, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
			t.Fatal(err)
		}
		waitGone(t, cl, dependent)
	})

	t.Run("namespace", func(t *testing.T) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gc-ns"}}
		create(t, cl, ns)
		create(t, cl, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "gc-ns", Name: "content"}})
		if err := cl.Delete(ctx, ns); err != nil {
			t.Fatal(err)
		}
		waitGone(t, cl, ns)
	})
}

func create(t *testing.T, cl client.Client, obj client.Object) {
	t.Helper()
	if err := cl.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %s: %v", obj.GetName(), err)
	}
}

// controllerRef is the ownerReference a controller puts on what it renders.
func controllerRef(apiVersion, kind string, owner client.Object) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         apiVersion,
		Kind:               kind,
		Name:               owner.GetName(),
		UID:                owner.GetUID(),
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}
}

// gatewayAPI is a Gateway API object in namespace gc, unstructured so that the test needs
// no Gateway API scheme.
func gatewayAPI(kind, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: kind})
	u.SetNamespace("gc")
	u.SetName(name)
	return u
}

// waitGone waits until obj no longer exists.
func waitGone(t *testing.T, cl client.Client, obj client.Object) {
	t.Helper()
	fresh := obj.DeepCopyObject().(client.Object)
	kubetest.Eventually(t, gcTimeout, fmt.Sprintf("%s deleted", obj.GetName()), func() error {
		err := cl.Get(context.Background(), client.ObjectKeyFromObject(obj), fresh)
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		}
		return fmt.Errorf("still there (deletionTimestamp %v, finalizers %v)", fresh.GetDeletionTimestamp(), fresh.GetFinalizers())
	})
}
