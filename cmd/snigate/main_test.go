package main

import "testing"

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
