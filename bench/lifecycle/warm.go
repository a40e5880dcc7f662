package main

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/stead-dev/stead/bench/internal/benchd"
	"github.com/stead-dev/stead/client"
)

// warmSize is the warm pool of the pooled daemon.
const warmSize = 4

// warmPairs measures create → first exec on a daemon with a warm pool of
// the host template (`serve --warm host=4`) and on one without, one
// iteration on each in turn. Each pooled create is checked in the
// daemon's log to have come from the pool, and the pool is let refill
// (untimed) before the cold create, so that neither side pays for it.
func warmPairs(ctx context.Context, n int, bin, poolKind string) ([]benchd.Series, error) {
	pooled, err := benchd.Start(ctx, bin, poolKind, 16, "--warm", fmt.Sprintf("host=%d", warmSize))
	if err != nil {
		return nil, err
	}
	defer pooled.Close()
	cold, err := benchd.Start(ctx, bin, poolKind, 16)
	if err != nil {
		return nil, err
	}
	defer cold.Close()
	trueCmd := client.ExecRequest{Command: []string{"/bin/true"}}
	// Build the cold daemon's host template.
	if sb, err := cold.Client.CreateSandbox(ctx, client.CreateSandboxRequest{IdleTimeout: "0"}); err != nil {
		return nil, err
	} else if _, err := cold.Client.DeleteSandbox(ctx, sb.ID, true); err != nil {
		return nil, err
	}
	made := warmSize
	if err := waitWarm(pooled, made); err != nil {
		return nil, err
	}
	one := func(c *client.Client) (time.Duration, string, error) {
		t0 := time.Now()
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{IdleTimeout: "0"})
		if err != nil {
			return 0, "", err
		}
		if _, err := c.Exec(ctx, sb.ID, trueCmd); err != nil {
			return 0, "", err
		}
		d := time.Since(t0)
		_, err = c.DeleteSandbox(ctx, sb.ID, true)
		return d, sb.ID, err
	}
	var fromPool, coldD []time.Duration
	for range n {
		d, id, err := one(pooled.Client)
		if err != nil {
			return nil, fmt.Errorf("create from the warm pool: %w", err)
		}
		log, _ := pooled.Log()
		if !bytes.Contains(log, []byte(`msg="sandbox created" sandbox=`+id+" tenant=default warm=true")) {
			return nil, fmt.Errorf("sandbox %s was not taken from the warm pool", id)
		}
		fromPool = append(fromPool, d)
		made++
		// The refill ends before the cold create: neither side pays for it.
		if err := waitWarm(pooled, made); err != nil {
			return nil, err
		}
		if d, _, err = one(cold.Client); err != nil {
			return nil, fmt.Errorf("cold create: %w", err)
		}
		coldD = append(coldD, d)
	}
	return []benchd.Series{
		{Name: fmt.Sprintf("stead create → first exec, from a warm pool (serve --warm host=%d)", warmSize), D: fromPool},
		{Name: "stead create → first exec, cold (paired with the row above)", D: coldD},
	}, nil
}

// waitWarm waits until d has made want warm sandboxes.
func waitWarm(d *benchd.Daemon, want int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		log, err := d.Log()
		if err != nil {
			return err
		}
		if bytes.Count(log, []byte(`msg="warm sandbox ready"`)) >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the warm pool made fewer than %d sandboxes in 2 minutes", want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
