// Command kube-apiserver builds the upstream kube-apiserver 1.36.3 from the k8s.io/kubernetes
// module, so that snigate's controller tests run against a real API server.
// scripts/install-kube.sh builds it once per machine into a cache folder; the main function
// is upstream's cmd/kube-apiserver/apiserver.go.
package main

import (
	"os"
	_ "time/tzdata" // for timeZone support in CronJob

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
