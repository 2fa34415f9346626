// Package trustanchor is the TrustAnchor stage of snigate's tenant layer: a pure function
// from TrustAnchors (and the Secrets, Roles and RoleBindings of their namespaces) to the
// key-free CA bundles published for tenants, and each TrustAnchor's status. It does no I/O,
// like render and translate: a controller reads the cluster, applies the Result with
// server-side apply, deletes what a TrustAnchor controls and the Result lacks, writes the
// status and records the warnings as Warning events.
//
//	out := trustanchor.Render(trustanchor.Input{
//		TrustAnchors: anchors, Secrets: secrets, Roles: roles, RoleBindings: bindings,
//	}, trustanchor.Options{Previous: last, InUse: probed})
//	// apply out.Secrets, out.Roles, out.RoleBindings; delete the stale ones;
//	// write out.Anchors[i].Status; emit out.Anchors[i].Warnings; last = out
//
// What one TrustAnchor <a> in namespace <ns>, release <r> (spec.release, default <a>),
// renders when its source is good:
//   - Secret <r>.tenant-ca with one key, ca.crt: the source key's CA certificates, encoded
//     anew from their DER (never the source's bytes), then any CA kept by a rotation;
//   - Role and RoleBinding <r>.tenant-ca-reader (when spec.readers is not empty): get on
//     resourceNames [<r>.tenant-ca] and nothing else, never the source, bound to the readers
//     (User and Group default to the RBAC API group, a ServiceAccount to <ns>).
//
// Each is labelled snigate.dev/trust-anchor=<a> and, when the TrustAnchor has a UID (read
// from a cluster), owned by it as controller, so deleting the TrustAnchor collects them.
//
// The source key must be PEM CERTIFICATE blocks of CAs and nothing else (Guard): a private
// key anywhere in it says ContainsPrivateKey, checked first over every byte; no
// certificate, or anything besides certificates, NotACertificate; a certificate that is not
// a CA (the reference platform published leaves) NotACA, naming its subject. A missing
// Secret or key says SourceNotFound.
//
// A name held by an object the TrustAnchor does not control (by UID when it has one), or
// rendered by an older TrustAnchor of the namespace, is never overwritten: Ready says
// NameCollision and a Warning names the object.
//
// Bad input never takes a working bundle from clients: on every failure the previous
// projection (Options.Previous, or after a restart the objects the TrustAnchor controls in
// Input, if their bundle still passes the Guard) is rendered again, as far as its names are
// still free, with the readers of the current spec (of the previous RoleBinding when the
// spec is invalid). A grant never outlives what it grants:
// the previous Secret's name taken by a foreign Secret keeps nothing (the Role would let the
// readers get that Secret); a foreign Role or RoleBinding at the reader name keeps the
// Secret and withdraws the grant. So the Result is always the whole desired state.
//
// Rotation without breaking clients: when the source's CAs change, a CA of the previous
// bundle that the source no longer holds stays in the bundle (status previous: true) while
// a backend of the TrustAnchor still serves a chain from it (Options.InUse, from the
// certificate probe), and goes once none does. Until the probe reports (InUse nil), such a
// CA stays. The bundle lists the source's CAs in source order, then the kept ones in the
// previous bundle's order; duplicates once.
package trustanchor
