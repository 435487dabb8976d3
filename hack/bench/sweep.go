package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// cpusFlag is --cpus: one GOMAXPROCS for every process ("2"), or a cores
// sweep ("1,2") that runs every scenario once per value.
type cpusFlag []int

func (c *cpusFlag) String() string {
	var parts []string
	for _, n := range *c {
		parts = append(parts, strconv.Itoa(n))
	}
	return strings.Join(parts, ",")
}

func (c *cpusFlag) Set(s string) error {
	*c = nil
	for _, part := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 0 {
			return fmt.Errorf("want a CPU count or a comma-separated list of them, e.g. 2 or 1,2")
		}
		*c = append(*c, n)
	}
	return nil
}

// pinArgs wraps bin and args in taskset so that the process and every
// thread it starts run on CPUs 0..n-1 only: GOMAXPROCS bounds the threads
// running Go code, not the cores they run on, nor the kernel's work for the
// process' syscalls. Without taskset, or when n covers every CPU, it
// returns them unchanged.
func pinArgs(taskset string, n, numCPU int, bin string, args []string) (string, []string) {
	if taskset == "" || n <= 0 || n >= numCPU {
		return bin, args
	}
	return taskset, append([]string{"-c", fmt.Sprintf("0-%d", n-1), bin}, args...)
}

// sweepKey identifies a scenario across the passes of a sweep.
func sweepKey(r *record) string { return r.Scenario + "/" + sizeName(r.PayloadBytes) }

// fillSweep gives every record of a sweep its scenario's MiB/s at each
// CPU count and the growth from the first count to the last.
func fillSweep(recs []*record, cpus []int) {
	if len(cpus) < 2 {
		return
	}
	by := map[string]map[string]float64{}
	for _, r := range recs {
		if r.MBPerSec == nil {
			continue
		}
		k := sweepKey(r)
		if by[k] == nil {
			by[k] = map[string]float64{}
		}
		by[k][strconv.Itoa(r.CPUs)] = *r.MBPerSec
	}
	first, last := strconv.Itoa(cpus[0]), strconv.Itoa(cpus[len(cpus)-1])
	for _, r := range recs {
		m := by[sweepKey(r)]
		if m == nil {
			continue
		}
		r.MBPerSecByCPUs = m
		if m[first] > 0 && m[last] > 0 {
			r.CoreScaling = num(m[last] / m[first])
		}
	}
}

// writeSweep writes the cores sweep: per scenario the runner side's MiB/s
// at each CPU count, the growth from the first to the last, and at each
// count the cores each process used (which one is at its limit).
func writeSweep(w io.Writer, recs []*record, cpus []int, markdown bool) {
	if len(cpus) < 2 {
		return
	}
	head := []string{"scenario", "payload"}
	for _, n := range cpus {
		head = append(head, fmt.Sprintf("MiB/s @%d", n))
	}
	head = append(head, fmt.Sprintf("x @%d/@%d", cpus[len(cpus)-1], cpus[0]))
	for _, n := range cpus {
		head = append(head, fmt.Sprintf("cores used @%d (CPU µs/msg)", n))
	}
	var rows [][]string
	seen := map[string]bool{}
	for _, r := range recs {
		k := sweepKey(r)
		if seen[k] || r.Skipped != "" {
			continue
		}
		seen[k] = true
		row := []string{r.Scenario, sizeName(r.PayloadBytes)}
		for _, n := range cpus {
			row = append(row, fmtFloat(mapNum(r.MBPerSecByCPUs, strconv.Itoa(n)), 1))
		}
		row = append(row, fmtFloat(r.CoreScaling, 2))
		for _, n := range cpus {
			row = append(row, splitText(recordAt(recs, k, n)))
		}
		rows = append(rows, row)
	}
	if markdown {
		fmt.Fprintf(w, "\n| %s |\n|%s\n", strings.Join(head, " | "), strings.Repeat("---|", len(head)))
		for _, row := range rows {
			fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
		}
		return
	}
	fmt.Fprintln(w, "\ncores sweep (runner side; cores = CPU seconds per second of the window):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  "+strings.Join(head, "\t")+"\t")
	for _, row := range rows {
		fmt.Fprintln(tw, "  "+strings.Join(row, "\t")+"\t")
	}
	tw.Flush()
}

func mapNum(m map[string]float64, k string) *float64 {
	if v, ok := m[k]; ok {
		return &v
	}
	return nil
}

// recordAt is the record of scenario key k at n CPUs, or nil.
func recordAt(recs []*record, k string, n int) *record {
	for _, r := range recs {
		if sweepKey(r) == k && r.CPUs == n {
			return r
		}
	}
	return nil
}

// splitText lists the cores each process of the runner side used, most
// first, with its CPU µs per message: "runner 0.95 (1328), udsink 0.80 (1172)".
func splitText(r *record) string {
	if r == nil || len(r.ProcessCores) == 0 {
		return "-"
	}
	kinds := make([]string, 0, len(r.ProcessCores))
	for k := range r.ProcessCores {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return r.ProcessCores[kinds[i]] > r.ProcessCores[kinds[j]] })
	var parts []string
	for _, k := range kinds {
		us := r.ProcessCPUUsPerMsg[k]
		parts = append(parts, fmt.Sprintf("%s %.2f (%s)", k, r.ProcessCores[k], fmtCPU(&us)))
	}
	return strings.Join(parts, ", ")
}
