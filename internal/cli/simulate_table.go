package cli

import (
	"fmt"
	"io"
	"strconv"
	"time"
)

// writeSimulateTable prints one row per claim with its devices (or the
// reason it was not allocated) underneath, then the pools.
func writeSimulateTable(stdout, stderr io.Writer, out *SimulateOutput) error {
	if len(out.Results) == 0 {
		fmt.Fprintln(stderr, "No claims to allocate (every claim already has status.allocation).")
	} else {
		t := &table{header: []string{"CLAIM", "ALLOCATED", "NODE", "DEVICES", "TIME"}}
		for _, r := range out.Results {
			took := time.Duration(r.Seconds * float64(time.Second)).Round(time.Microsecond).String()
			if !r.Allocated {
				t.add([]string{r.Claim, "false", "", "0", took}, r.Reason)
				continue
			}
			var under []string
			n := 0
			if r.Allocation != nil {
				n = len(r.Allocation.Devices.Results)
				for _, d := range r.Allocation.Devices.Results {
					l := fmt.Sprintf("%s: %s/%s/%s", d.Request, d.Driver, d.Pool, d.Device)
					if d.AdminAccess != nil && *d.AdminAccess {
						l += " (admin access)"
					}
					under = append(under, l)
				}
			}
			t.add([]string{r.Claim, "true", dash(r.Node), strconv.Itoa(n), took}, under...)
		}
		fmt.Fprintf(stdout, "Engine: %s\n\n", out.Engine)
		if err := t.write(stdout); err != nil {
			return err
		}
	}
	if len(out.Pools) == 0 {
		fmt.Fprintln(stderr, "No pools found.")
		return nil
	}
	fmt.Fprintln(stdout)
	return writePoolTable(stdout, out.Pools)
}
