// Package charts tests the Helm chart charts/snigate with the Helm Go SDK: it lints the
// chart, renders it with default and non-default values and checks what each value changes
// in the typed objects, applies the render to a real kube-apiserver, and checks that the
// chart installs the same objects as `kubectl kustomize config/default`, the source of truth,
// and that its crds/ are that render of config/crd (scripts/generate.sh writes them).
//
// The package lives outside the chart folder so that Helm never packages its files.
package charts
