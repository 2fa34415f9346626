// Package cpscale is snigate's control-plane scale benchmark: a real kube-apiserver and
// etcd with the install's RBAC, `snigate controller` with its local proxy running as the
// install's ServiceAccount, a TLS backend in a network namespace, and tenants by the
// hundred, each a TenantGateway sharing one platform Gateway (a ListenerSet each), a
// TrustAnchor and its DatabaseExposures. It measures, at each step:
//
//   - initial convergence after the controller starts: until every exposure is Programmed,
//     and until a sample of them completes a TLS handshake through snigate;
//   - apply → serving: one more exposure created, until a TLS client with its SNI completes a
//     handshake with the backend through snigate; delete → refused: until the same client is
//     closed without a byte; and the floor of both, a bare informer on the same API server
//     seeing the same create and delete;
//   - the controller's RSS and CPU, the API requests it made for one new exposure (from the
//     API server's audit log, by verb and resource), and the certificate probe's connections
//     a minute;
//   - where the trials' changes spent the controller's time, by its own account
//     (snigate_pipeline_stage_seconds): each stage's mean per run and runs per trial.
//
// With SNIGATE_CPSCALE_PROVISION (bench/cpscale.sh --provision) the controller runs with
// --provision instead of its local proxy: kube-controller-manager rolls out the data plane
// Deployments it writes, and a stand-in node (internal/testutil/dpnode) runs their Pods as
// `snigate dataplane` processes behind a load balancer, so a new exposure is served once its
// TLSRoute has reached a data plane through the API server; the data planes' RSS and CPU are
// reported beside the controller's.
//
// It is a benchmark, not a test: it runs only when asked (bench/cpscale.sh), reports the
// numbers (JSON, and a Markdown table for docs/performance.md) and fails only when something
// could not be measured.
//
//	bench/cpscale.sh            # steps 10, 100 and 1 000 tenants × 10 exposures, then 10 000 on one tenant
//	bench/cpscale.sh --smoke    # the 10 × 10 step with 5 trials (CI)
//	bench/cpscale.sh --provision # the full steps with provisioned data planes
package cpscale
