package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// printTable writes the results as an aligned table, then the notes,
// skips and errors under it, numbered by row.
func printTable(w io.Writer, recs []*record) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	width := len("scenario")
	for _, r := range recs {
		width = max(width, len(rowName(r)))
	}
	fmt.Fprintln(tw, "scenario"+strings.Repeat(" ", max(0, width-len("scenario")))+"\tpayload\tmsgs/s\tMiB/s\tbaseline msgs/s\tx base\tseq msgs/s\tx seq\tpeer msgs/s\tx peer\tRSS MiB\tp50 ms\tp99 ms\tp50|p99 ms ½max\tCPU µs/msg\tbase|peer CPU\tCPU µs/MiB run|seq\tx seq CPU\ttargets\t")
	var foot []string
	for i, r := range recs {
		name := rowName(r) + strings.Repeat(" ", width-len(rowName(r))) // left-aligned in a right-aligned table
		if r.Skipped != "" {
			fmt.Fprintf(tw, "%s\t%s%s\tskipped [%d]\t\n", name, sizeName(r.PayloadBytes), strings.Repeat("\t-", 16), i+1)
			foot = append(foot, fmt.Sprintf("[%d] %s/%s skipped: %s", i+1, r.Scenario, sizeName(r.PayloadBytes), r.Skipped))
			continue
		}
		tg := targetText(r.Targets)
		if len(r.Errors)+len(r.Notes) > 0 {
			tg += fmt.Sprintf(" [%d]", i+1)
			for _, e := range r.Errors {
				foot = append(foot, fmt.Sprintf("[%d] %s/%s error: %s", i+1, r.Scenario, sizeName(r.PayloadBytes), firstLine(e)))
			}
			for _, n := range r.Notes {
				foot = append(foot, fmt.Sprintf("[%d] %s/%s: %s", i+1, r.Scenario, sizeName(r.PayloadBytes), n))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			name, sizeName(r.PayloadBytes),
			fmtRate(r.MsgsPerSec), fmtFloat(r.MBPerSec, 1),
			fmtRate(r.BaselineMsgsPerSec), fmtFloat(r.RatioToBaseline, 2),
			fmtRate(r.SequentialMsgsPerSec), fmtFloat(r.RatioToSequential, 2),
			fmtRate(r.PeerMsgsPerSec), fmtFloat(r.RatioToPeer, 2),
			fmtFloat(r.PeakRSSMB, 0), fmtFloat(r.P50MS, 2), fmtFloat(r.P99MS, 2), halfRateText(r),
			fmtCPU(r.CPUUsPerMsg), fmtCPU(r.BaselineCPUUsPerMsg)+"|"+fmtCPU(r.PeerCPUUsPerMsg),
			fmtCPU(r.CPUUsPerMiB)+"|"+fmtCPU(r.SequentialCPUUsPerMiB), fmtFloat(r.CPURatioToSequential, 2), tg)
	}
	tw.Flush()
	if len(foot) > 0 {
		fmt.Fprintln(w)
		for _, f := range foot {
			fmt.Fprintln(w, f)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "baselines and peers:")
	seen := map[string]bool{}
	for _, r := range recs {
		if seen[r.Scenario] {
			continue
		}
		seen[r.Scenario] = true
		var parts []string
		if r.Baseline != "" {
			parts = append(parts, "baseline "+r.Baseline)
		}
		if r.SequentialBaseline != "" {
			parts = append(parts, "seq "+r.SequentialBaseline)
		}
		if r.Peer != "" {
			parts = append(parts, "peer "+r.Peer)
		}
		if r.LatencySource != "" {
			parts = append(parts, "latency: "+r.LatencySource)
		}
		if len(parts) > 0 {
			fmt.Fprintf(w, "  %s: %s\n", r.Scenario, strings.Join(parts, "; "))
		}
	}
}

func targetText(ts []target) string {
	var parts []string
	for _, t := range ts {
		mark := "ok"
		if !t.Met {
			mark = "MISS"
		}
		parts = append(parts, t.What+" "+mark)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}

// rowName is the scenario, with the CPU count when --cpus set one.
func rowName(r *record) string {
	if r.CPUs > 0 {
		return fmt.Sprintf("%s @%dcpu", r.Scenario, r.CPUs)
	}
	return r.Scenario
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// fmtRate prints a rate with thousands separators, "-" when not measured.
func fmtRate(v *float64) string {
	if v == nil {
		return "-"
	}
	n := int64(*v + 0.5)
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func fmtFloat(v *float64, prec int) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, *v)
}

// writeMarkdown writes the table as Markdown, for RESULTS.md and the README.
func writeMarkdown(w io.Writer, recs []*record) {
	fmt.Fprintln(w, "| scenario | payload | msgs/s | MiB/s | baseline msgs/s | x baseline | seq baseline msgs/s | x seq baseline | peer msgs/s | x peer | peak RSS MiB | p50 ms | p99 ms | p50 / p99 ms at ½ max | CPU µs/msg (runner / baseline / peer) | CPU µs/MiB (runner / seq baseline) | x seq CPU | targets |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|")
	for _, r := range recs {
		if r.Skipped != "" {
			fmt.Fprintf(w, "| %s | %s |%s skipped: %s |\n", rowName(r), sizeName(r.PayloadBytes), strings.Repeat(" |", 15), r.Skipped)
			continue
		}
		tg := targetText(r.Targets)
		if len(r.Errors) > 0 {
			tg += " (error: " + firstLine(r.Errors[0]) + ")"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s / %s | %s / %s | %s | %s |\n",
			rowName(r), sizeName(r.PayloadBytes),
			fmtRate(r.MsgsPerSec), fmtFloat(r.MBPerSec, 1),
			fmtRate(r.BaselineMsgsPerSec), fmtFloat(r.RatioToBaseline, 2),
			fmtRate(r.SequentialMsgsPerSec), fmtFloat(r.RatioToSequential, 2),
			fmtRate(r.PeerMsgsPerSec), fmtFloat(r.RatioToPeer, 2),
			fmtFloat(r.PeakRSSMB, 0), fmtFloat(r.P50MS, 2), fmtFloat(r.P99MS, 2), strings.ReplaceAll(halfRateText(r), "|", " / "),
			fmtCPU(r.CPUUsPerMsg), fmtCPU(r.BaselineCPUUsPerMsg), fmtCPU(r.PeerCPUUsPerMsg),
			fmtCPU(r.CPUUsPerMiB), fmtCPU(r.SequentialCPUUsPerMiB), fmtFloat(r.CPURatioToSequential, 2),
			strings.ReplaceAll(tg, "|", "/"))
	}
}

// halfRateText is the runner's p50|p99 at half its max rate, "-" when not
// measured.
func halfRateText(r *record) string {
	if r.HalfRateP50MS == nil {
		return "-"
	}
	return fmtFloat(r.HalfRateP50MS, 2) + "|" + fmtFloat(r.HalfRateP99MS, 2)
}

// fmtCPU prints µs per message with two significant digits or so.
func fmtCPU(v *float64) string {
	switch {
	case v == nil:
		return "-"
	case *v < 10:
		return fmt.Sprintf("%.2f", *v)
	case *v < 100:
		return fmt.Sprintf("%.1f", *v)
	}
	return fmt.Sprintf("%.0f", *v)
}
