// Package v1alpha1 holds snigate's own API, group snigate.dev, version v1alpha1: the tenant
// exposure layer on top of the Gateway API.
//
//   - TenantGateway (short name tgw): one per tenant. snigate renders it into the real
//     Gateway, its listeners, the HTTP-to-HTTPS redirect and the cert-manager objects
//     (internal/render), and reports in its status what it rendered and why.
//
// The CRDs in config/crd/snigate are generated from these types by controller-gen
// (scripts/generate.sh); a test fails when the committed CRDs differ from the generated
// ones. Every CEL rule of the CRD has its Go twin in Validate*, which standalone mode runs on
// files: one table of cases goes through both (the real API server and the Go function) and
// fails when they disagree.
//
// +kubebuilder:object:generate=true
// +groupName=snigate.dev
package v1alpha1
