// Package translate is snigate's pure translate stage: Gateway API and core objects in,
// an immutable routing snapshot and the Gateway API status of every object out.
//
//	res, _ := file.Load("examples/quickstart")
//	r := translate.Translate(res, translate.Options{})
//	if len(r.Errors) > 0 { /* input rejected as a whole: keep the previous snapshot */ }
//	proxy.Swap(r.Snapshot); statusWriter.Write(r.Status)
//
// Translate does no I/O, starts no goroutines and reads no clock except Options.Now; the same
// input always gives the same output, which the golden tests in testdata/ pin down.
//
// # Two kinds of problems
//
// Input that the Gateway API CRDs' OpenAPI/CEL validation (or the API server) would refuse to
// store — an invalid hostname, a port out of range, a TLSRoute with two rules, duplicate
// listener names, a missing required field — can never exist in a cluster. From files it
// rejects the whole configuration: Result.Errors names file, object and field, and
// Result.Snapshot is nil so the caller keeps serving what it served before.
//
// Everything else is reported the way a Gateway API controller reports it, in status
// conditions, and the rest of the configuration is served: a missing backend, a Secret that
// does not parse, a route that no listener allows.
//
// # Decisions where the specification leaves room
//
//   - GatewayClass: a Gateway is ours when its GatewayClass has our controllerName. When the
//     input holds no GatewayClass of that name at all, the class is taken as ours (standalone
//     file mode needs no GatewayClass), unless Options.RequireGatewayClass is set (Kubernetes).
//   - Addresses: every spec.addresses entry of type IPAddress is bound (an empty value means
//     Options.DefaultBindAddress); without any, DefaultBindAddress. Other address types make
//     the Gateway Accepted=False/UnsupportedAddress; one outside Options.UsableAddresses
//     makes it Programmed=False/AddressNotUsable. Status.addresses lists the bound
//     addresses once a listener is programmed.
//   - Provisioned (Options.ProvisionedAddresses: internal/provision gives each Gateway its
//     own data plane and LoadBalancer Service): status.addresses are the load balancer's
//     addresses of that Service, and a Gateway with programmed listeners but no such
//     address yet is Programmed=False/AddressNotAssigned. spec.addresses are the load
//     balancer's to hold (an empty value: any of its pool); the listeners bind
//     DefaultBindAddress, the Pod's.
//   - Several Gateways on one port: a socket cannot serve two Gateways, so Gateways are not
//     merged. The oldest Gateway (creationTimestamp, then namespace/name) keeps the port; a
//     listener of a younger Gateway whose address and port overlap (0.0.0.0 and :: overlap
//     every address of their family) gets Accepted=False/PortUnavailable. Provisioned
//     Gateways never share a socket: each keeps its ports.
//   - Listener conflicts: a TCP listener sharing its port with any other listener, an HTTP
//     listener sharing its port with a TLS or HTTPS listener (ProtocolConflict), and TLS or
//     HTTPS listeners sharing port and hostname (HostnameConflict) are Conflicted=True and
//     Accepted=False with the conflict's reason, as the TLSRoute conformance tests expect;
//     none of them is served. Listeners of protocols snigate does not serve (UDP, custom:
//     Accepted=False/UnsupportedProtocol) take part in no conflict. Passthrough, Terminate
//     and HTTPS listeners on one port with distinct hostnames are fine (TLSRouteModeMixed):
//     the port reads the ClientHello once and dispatches by SNI.
//   - HTTPRoute: precedence and status as the API defines them (see httproute.go). A route
//     using a feature snigate does not implement (URLRewrite, RequestMirror, CORS,
//     ExtensionRef and ExternalAuth filters, RegularExpression matches, backendRef filters,
//     timeouts, retries, session persistence) is Accepted=False/UnsupportedValue rather than
//     served without it. The routes of a more specific hostname are tried first; a request
//     none of their matches take falls through to those of each wildcard that covers the
//     name, then the catch-all's (an ACME challenge route for app.example.com leaves every
//     other path of that name to the tenant's *.example.com redirect).
//   - A listener is Programmed (and in the snapshot) when its Gateway and itself are
//     accepted, all its certificateRefs resolve, and it allows at least one route kind. A
//     Terminate listener with one bad certificateRef serves nothing: it fails closed.
//   - Routes attach per the spec: a route counts in attachedRoutes, and is Accepted=True, when
//     its parentRef selects the listener, the listener's allowedRoutes admit it and (TLSRoute)
//     a hostname intersects — whatever the listener's own status. It is Accepted=True even
//     where older routes claimed all its hostnames (GEP-2644: "all attached routes are
//     Accepted"); the snapshot serves each hostname from the oldest route only.
//   - Namespaces for allowedRoutes selectors carry the label kubernetes.io/metadata.name=<name>
//     as every real namespace does, also when the input has no Namespace object.
//   - Backends: a valid Service backend without ready endpoints keeps ResolvedRefs=True and is
//     marked NoReadyEndpoints in the snapshot only. ExternalName Services are not followed
//     (InvalidKind). A backendRef to a Service port that does not exist is BackendNotFound.
//   - Annotation snigate.dev/max-connections-per-listener: "N" on a Gateway caps concurrent
//     connections on each socket the Gateway binds (snapshot.Port.MaxConnections); a value
//     that is not a non-negative integer makes the Gateway Accepted=False/Invalid.
package translate
