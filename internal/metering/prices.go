package metering

import (
	"encoding/json"
	"fmt"
	"math"
	"os"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// Rates per unit: E2B's published usage prices (per vCPU-second
// $0.000014, per GiB-second of memory $0.0000045), so a named type costs
// what the same cpus and memory cost there.
const (
	defaultCPUHour       = 0.0504
	defaultMemoryGiBHour = 0.0162
)

// HoursPerMonth is the month a GB-month price means (365 x 24 / 12).
const HoursPerMonth = 730

// DefaultPrices are the prices used when none are configured: compute per
// hour by instance type (cpus x $0.0504 + GiB x $0.0162: micro $0.0333,
// small $0.0828, medium $0.1656, large $0.3312), $0.10 per GB-month in
// the local pool and $0.023 per GB-month in the repository (S3 standard's
// price).
func DefaultPrices() client.Prices {
	p := client.Prices{CPUHour: defaultCPUHour, MemoryGiBHour: defaultMemoryGiBHour, LocalGBMonth: 0.10, RepositoryGBMonth: 0.023,
		ComputePerHour: map[string]float64{}}
	for _, t := range []struct {
		name string
		cpus float64
		gib  float64
	}{{"micro", 0.5, 0.5}, {"small", 1, 2}, {"medium", 2, 4}, {"large", 4, 8}} {
		p.ComputePerHour[t.name] = round4(t.cpus*defaultCPUHour + t.gib*defaultMemoryGiBHour)
	}
	return p
}

func round4(x float64) float64 { return math.Round(x*1e4) / 1e4 }

// LoadPrices reads prices from a JSON file in the form of client.Prices;
// fields it leaves out keep their defaults, and types it names are added
// to (or replace) the default types. A negative price is refused.
func LoadPrices(path string) (client.Prices, error) {
	p := DefaultPrices()
	if path == "" {
		return p, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return p, fmt.Errorf("read prices %s: %w", path, err)
	}
	var in client.Prices
	in.CPUHour, in.MemoryGiBHour, in.LocalGBMonth, in.RepositoryGBMonth = -1, -1, -1, -1
	if err := json.Unmarshal(b, &in); err != nil {
		return p, fmt.Errorf("read prices %s: %w: %w", path, err, errs.ErrInvalid)
	}
	set := func(dst *float64, v float64) {
		if v >= 0 {
			*dst = v
		}
	}
	set(&p.CPUHour, in.CPUHour)
	set(&p.MemoryGiBHour, in.MemoryGiBHour)
	set(&p.LocalGBMonth, in.LocalGBMonth)
	set(&p.RepositoryGBMonth, in.RepositoryGBMonth)
	for t, v := range in.ComputePerHour {
		if v < 0 {
			return p, fmt.Errorf("read prices %s: compute price of %s is negative: %w", path, t, errs.ErrInvalid)
		}
		p.ComputePerHour[t] = v
	}
	return p, nil
}

// hourly is the compute price of an hour of a sandbox: its type's, or for
// a type without a price (custom limits) its cpus and memory at the unit
// rates.
func hourly(p client.Prices, typ string, cpus float64, memBytes int64) float64 {
	if v, ok := p.ComputePerHour[typ]; ok {
		return v
	}
	return cpus*p.CPUHour + float64(memBytes)/(1<<30)*p.MemoryGiBHour
}
