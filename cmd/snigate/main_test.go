package main

import (
	"strings"
	"testing"
)

func TestFirstLoadHeapLimit(t *testing.T) {
	for _, c := range []struct {
		memMax string
		want   int64
	}{
		{"", 512 << 20},              // no cgroup v2
		{"max\n", 512 << 20},         // no limit
		{"268435456\n", 128 << 20},   // 256 MiB container: half of it
		{"17179869184\n", 512 << 20}, // 16 GiB: the 512 MiB cap
		{"garbage", 512 << 20},
	} {
		if got := firstLoadHeapLimit(c.memMax); got != c.want {
			t.Errorf("firstLoadHeapLimit(%q) = %d, want %d", c.memMax, got, c.want)
		}
	}
}

// Flags that cannot work together are refused before anything connects to an API server.
func TestControllerFlagConflicts(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--provision", "--dataplane-image", "x", "--proxy"}, "--provision serves traffic from the provisioned data planes"},
		{[]string{"--provision", "--dataplane-image", "x", "--load-balancer-addresses", "not-a-prefix"}, "--load-balancer-addresses"},
		{[]string{"--local-addresses", "127.0.0.1"}, "--local-addresses"},
	} {
		err := runController(append(c.args, "--kubeconfig", "/nonexistent/kubeconfig"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("snigate controller %v: error %v, want one containing %q", c.args, err, c.want)
		}
	}
}
