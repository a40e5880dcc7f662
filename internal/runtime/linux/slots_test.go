package linux

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestSlotTableFindsTheLowestFreeSlot: over random starts, moves and
// stops of holders, the table's lowest free slot is always the one a
// look at every holder gives (the lowest slot no holder but except
// holds), across word boundaries and with every slot taken.
func TestSlotTableFindsTheLowestFreeSlot(t *testing.T) {
	const n = 200
	rng := rand.New(rand.NewPCG(1, 2))
	tab := newSlotTable()
	want := func(except string) int {
		used := map[int]bool{}
		for id, s := range tab.of {
			if id != except {
				used[s] = true
			}
		}
		for s := range n {
			if !used[s] {
				return s
			}
		}
		return -1
	}
	ids := func() []string {
		var out []string
		for id := range tab.of {
			out = append(out, id)
		}
		return out
	}
	for i := range 20000 {
		held := ids()
		switch op := rng.IntN(10); {
		case op < 6 || len(held) == 0: // a start takes the lowest free slot
			id := "sb-" + strconv.Itoa(i)
			if s := tab.lowestFree(id, n); s >= 0 {
				tab.set(id, s)
			}
		case op < 7: // a shell's slot moves to its sandbox
			from := held[rng.IntN(len(held))]
			s := tab.of[from]
			tab.drop(from)
			tab.set("moved-"+strconv.Itoa(i), s)
		default: // a stop
			tab.drop(held[rng.IntN(len(held))])
		}
		except := ""
		if held := ids(); len(held) > 0 && rng.IntN(2) == 0 {
			except = held[rng.IntN(len(held))]
		}
		if got, w := tab.lowestFree(except, n), want(except); got != w {
			t.Fatalf("step %d: lowest free slot (except %q) %d, want %d (%d held)", i, except, got, w, len(tab.of))
		}
	}
	// Every slot taken, then one freed in the last word.
	tab = newSlotTable()
	for s := range n {
		tab.set("sb-"+strconv.Itoa(s), s)
	}
	if got := tab.lowestFree("", n); got != -1 {
		t.Fatalf("every slot held: %d, want -1", got)
	}
	if got := tab.lowestFree("sb-130", n); got != 130 {
		t.Fatalf("every slot held, except sb-130's: %d, want 130", got)
	}
	tab.drop("sb-199")
	if got := tab.lowestFree("", n); got != 199 {
		t.Fatalf("slot 199 freed: %d", got)
	}
}
