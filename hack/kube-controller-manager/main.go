// Command kube-controller-manager builds the upstream kube-controller-manager 1.36.3 from the
// k8s.io/kubernetes module. A bare kube-apiserver never deletes what an owner owns: the
// garbage collector that does it lives here, so tests that must see owned objects go away
// with their owner run this beside the API server (kubetest's GarbageCollector option).
// scripts/install-kube.sh builds it once per machine next to kube-apiserver; the main
// function is upstream's cmd/kube-controller-manager/controller-manager.go.
package main

import (
	"os"
	_ "time/tzdata" // for CronJob time zone handling, as upstream links it

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
