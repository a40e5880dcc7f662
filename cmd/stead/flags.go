package main

import (
	"fmt"
	"strings"
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
