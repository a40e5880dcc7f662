package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/stead-dev/stead/client"
)

// parseEnv turns K=V strings into a map.
func parseEnv(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	env := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError{fmt.Errorf("--env %q: want KEY=VALUE", kv)}
		}
		env[k] = v
	}
	return env, nil
}

// splitAtDash splits positional arguments at the position of "--"
// (cobra's ArgsLenAtDash; -1 when there was none).
func splitAtDash(a []string, dashAt int) (before, after []string) {
	if dashAt < 0 {
		return a, nil
	}
	return a[:dashAt], a[dashAt:]
}

// parseVolumes turns --volume values into mounts.
func parseVolumes(specs []string) ([]client.VolumeMount, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	mounts := make([]client.VolumeMount, 0, len(specs))
	for _, s := range specs {
		m, err := client.ParseVolumeMount(s)
		if err != nil {
			return nil, usageError{fmt.Errorf("--volume: %w", err)}
		}
		mounts = append(mounts, m)
	}
	return mounts, nil
}

// parseLabels turns repeated --label KEY=VALUE flags into a map (the
// daemon validates keys and values).
func parseLabels(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError{fmt.Errorf("--label %q: want KEY=VALUE", kv)}
		}
		out[k] = v
	}
	return out, nil
}

// formatLabels renders labels as k=v,k=v in key order.
func formatLabels(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + l[k]
	}
	return strings.Join(keys, ",")
}
