package main

import (
	"strings"
	"testing"
)

func TestGCLimits(t *testing.T) {
	for _, c := range []struct {
		memMax   string
		limit    int64
		headroom uint64
	}{
		{"", 512 << 20, 64 << 20},              // no cgroup v2
		{"max\n", 512 << 20, 64 << 20},         // no limit
		{"268435456\n", 128 << 20, 32 << 20},   // 256 MiB container: half of it, an eighth
		{"17179869184\n", 512 << 20, 64 << 20}, // 16 GiB: the caps
		{"garbage", 512 << 20, 64 << 20},
	} {
		memMax := parseMemoryMax(c.memMax)
		if got := firstLoadHeapLimit(memMax); got != c.limit {
			t.Errorf("firstLoadHeapLimit(%q) = %d, want %d", c.memMax, got, c.limit)
		}
		if got := gcHeadroom(memMax); got != c.headroom {
			t.Errorf("gcHeadroom(%q) = %d, want %d", c.memMax, got, c.headroom)
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
